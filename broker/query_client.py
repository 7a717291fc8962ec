"""`broker.query_client` moved to `rmq_client.query`: a shim kept for one release.

Importing it warns (DeprecationWarning) and hands on the objects of the new module itself.
"""

from typing import Any

import rmq_client.query as _moved
from broker._moved import warn_moved
from rmq_client.query import *  # noqa: F403

warn_moved("broker.query_client", "rmq_client.query")


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
