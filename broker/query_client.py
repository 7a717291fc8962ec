"""`broker.query_client` moved to `rmq_client.query`: a shim kept for one release.

Importing it warns (DeprecationWarning) and hands on the objects of the new module itself.
"""

import warnings
from typing import Any

import rmq_client.query as _moved
from rmq_client.query import *  # noqa: F403

warnings.warn(
    "broker.query_client is deprecated: import rmq_client.query instead",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
