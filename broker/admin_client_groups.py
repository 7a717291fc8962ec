"""`broker.admin_client_groups` moved to `rmq_client.admin_groups`: a shim kept for one release.

Importing it warns (DeprecationWarning) and hands on the objects of the new module itself.
"""

from typing import Any

import rmq_client.admin_groups as _moved
from broker._moved import warn_moved
from rmq_client.admin_groups import *  # noqa: F403

warn_moved("broker.admin_client_groups", "rmq_client.admin_groups")


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
