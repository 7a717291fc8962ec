"""Which broker of the group a pull's answer tells the consumer to read from next (4.9's
`suggestWhichBrokerId` in `PullMessageProcessor`).

Without `slave_read_enable` always the master. With it, a consumer whose last pulled message
lies more than `access_message_in_memory_max_ratio` % of the machine's memory behind the end of
the commit log (so its reads hit the disk, not the page cache) is sent to the group's
`which_broker_when_consume_slowly` (a slave, 1 by default); any other to the group's `broker_id`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

from store.get_message import GetMessageResult

if TYPE_CHECKING:
    from broker.context import BrokerContext

MASTER_ID: Final = 0


def total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30  # no sysconf: a guess, used only to advise consumers


TOTAL_PHYSICAL_MEMORY: Final = total_physical_memory()


def suggest_broker_id(broker: BrokerContext, group_name: str, found: GetMessageResult) -> int:
    if not broker.config.slave_read_enable:
        return MASTER_ID
    group = broker.groups.find(group_name)
    if group is None:
        return MASTER_ID
    if consume_slowly(broker, found):
        return group.which_broker_when_consume_slowly
    return group.broker_id


def consume_slowly(broker: BrokerContext, found: GetMessageResult) -> bool:
    """The records pulled lie further behind the log's end than memory holds (4.9's rule)."""
    if found.max_physical_offset_pulling < 0 or broker.consume is None:
        return False
    ratio = broker.config.store.access_message_in_memory_max_ratio
    behind = broker.consume.files.max_offset - found.max_physical_offset_pulling
    return behind > TOTAL_PHYSICAL_MEMORY * ratio // 100
