"""`broker.pull_client` moved to `rmq_client.pull_consumer`: a shim kept for one release.

Importing it warns (DeprecationWarning) and hands on the objects of the new module itself.
"""

import warnings
from typing import Any

import rmq_client.pull_consumer as _moved
from rmq_client.pull_consumer import *  # noqa: F403

warnings.warn(
    "broker.pull_client is deprecated: import rmq_client.pull_consumer instead",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
