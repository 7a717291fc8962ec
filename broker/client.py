"""`broker.client` moved to `rmq_client.producer`: a shim kept for one release.

Importing it warns (DeprecationWarning) and hands on the objects of the new module itself.
"""

from typing import Any

import rmq_client.producer as _moved
from broker._moved import warn_moved
from rmq_client.producer import *  # noqa: F403

warn_moved("broker.client", "rmq_client.producer")


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
