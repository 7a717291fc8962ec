"""`broker.client` moved to `rmq_client.producer`: a shim kept for one release.

Importing it warns (DeprecationWarning) and hands on the objects of the new module itself.
"""

import warnings
from typing import Any

import rmq_client.producer as _moved
from rmq_client.producer import *  # noqa: F403

warnings.warn(
    "broker.client is deprecated: import rmq_client.producer instead",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
