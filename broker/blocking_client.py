"""`broker.blocking_client` moved to `rmq_client.blocking`: a shim kept for one release.

Importing it warns (DeprecationWarning) and hands on the objects of the new module itself.
"""

from typing import Any

import rmq_client.blocking as _moved
from broker._moved import warn_moved
from rmq_client.blocking import *  # noqa: F403

warn_moved("broker.blocking_client", "rmq_client.blocking")


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
