"""`broker.quick_send` moved to `rmq_client.quick_send`: a shim kept for one release.

Importing it warns (DeprecationWarning) and hands on the objects of the new module itself.
"""

import warnings
from typing import Any

import rmq_client.quick_send as _moved
from rmq_client.quick_send import *  # noqa: F403

warnings.warn(
    "broker.quick_send is deprecated: import rmq_client.quick_send instead",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
