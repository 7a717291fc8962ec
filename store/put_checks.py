"""The checks a put passes before it is encoded, in RocketMQ's order: the store's state, then the
message's own (RocketMQ's size limits, plus NUL).

Each returns the refusal as a `PutMessageStatus`, or None when the put may go on.
"""

from __future__ import annotations

from typing import Final

from store.config import BrokerRole, MessageStoreConfig
from store.encode import topic_field
from store.layout import MAX_TOPIC_BYTES
from store.message import MessageExtBrokerInner, get_transaction_value
from store.status import PutMessageStatus, RunningFlags

MAX_PROPERTIES_CHARS: Final = 32767


def check_store(
    config: MessageStoreConfig, flags: RunningFlags, closed: bool, busy: bool
) -> PutMessageStatus | None:
    """The store takes no put while closing, as a slave, while not writeable, or while its
    writer is stuck on the page cache (`busy`)."""
    if closed or config.broker_role is BrokerRole.SLAVE or not flags.is_writeable():
        return PutMessageStatus.SERVICE_NOT_AVAILABLE
    return PutMessageStatus.OS_PAGE_CACHE_BUSY if busy else None


def check_message(msg: MessageExtBrokerInner) -> PutMessageStatus | None:
    if len(msg.topic) > MAX_TOPIC_BYTES or len(topic_field(msg.topic)) > MAX_TOPIC_BYTES + 1:
        return PutMessageStatus.MESSAGE_ILLEGAL
    if len(msg.properties_string) > MAX_PROPERTIES_CHARS:
        return PutMessageStatus.MESSAGE_ILLEGAL
    if "\x00" in msg.properties_string or "\x00" in msg.topic:
        # recovery reads NUL in these fields as a zero-filled (torn) write
        return PutMessageStatus.MESSAGE_ILLEGAL
    return None


def check_batch(
    msgs: list[MessageExtBrokerInner], max_message_size: int
) -> PutMessageStatus | None:
    """A batch: each message's checks, one topic and queue, no transaction, bodies in bounds."""
    if not msgs:
        return PutMessageStatus.MESSAGE_ILLEGAL
    first = msgs[0]
    for msg in msgs:
        problem = check_message(msg)
        if problem is not None:
            return problem
        if (
            msg.topic != first.topic
            or msg.queue_id != first.queue_id
            or get_transaction_value(msg.sys_flag)
        ):
            return PutMessageStatus.MESSAGE_ILLEGAL
    if sum(len(msg.body) for msg in msgs) > max_message_size:
        return PutMessageStatus.MESSAGE_ILLEGAL
    return None
