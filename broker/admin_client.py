"""`broker.admin_client` moved to `rmq_client.admin`: a shim kept for one release.

Importing it warns (DeprecationWarning) and hands on the objects of the new module itself.
"""

from typing import Any

import rmq_client.admin as _moved
from broker._moved import warn_moved
from rmq_client.admin import *  # noqa: F403

warn_moved("broker.admin_client", "rmq_client.admin")


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
