"""`broker.tx_client` moved to `rmq_client.transaction`: a shim kept for one release.

Importing it warns (DeprecationWarning) and hands on the objects of the new module itself.
"""

from typing import Any

import rmq_client.transaction as _moved
from broker._moved import warn_moved
from rmq_client.transaction import *  # noqa: F403

warn_moved("broker.tx_client", "rmq_client.transaction")


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
