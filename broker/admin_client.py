"""`broker.admin_client` moved to `rmq_client.admin`: a shim kept for one release.

Importing it warns (DeprecationWarning) and hands on the objects of the new module itself.
"""

import warnings
from typing import Any

import rmq_client.admin as _moved
from rmq_client.admin import *  # noqa: F403

warnings.warn(
    "broker.admin_client is deprecated: import rmq_client.admin instead",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
