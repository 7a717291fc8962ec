"""`broker.quick_send` moved to `rmq_client.quick_send`: a shim kept for one release.

Importing it warns (DeprecationWarning) and hands on the objects of the new module itself.
"""

from typing import Any

import rmq_client.quick_send as _moved
from broker._moved import warn_moved
from rmq_client.quick_send import *  # noqa: F403

warn_moved("broker.quick_send", "rmq_client.quick_send")


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
