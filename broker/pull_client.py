"""`broker.pull_client` moved to `rmq_client.pull_consumer`: a shim kept for one release.

Importing it warns (DeprecationWarning) and hands on the objects of the new module itself.
"""

from typing import Any

import rmq_client.pull_consumer as _moved
from broker._moved import warn_moved
from rmq_client.pull_consumer import *  # noqa: F403

warn_moved("broker.pull_client", "rmq_client.pull_consumer")


def __getattr__(name: str) -> Any:
    return getattr(_moved, name)
