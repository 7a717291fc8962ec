"""Where a message is stored when it is not stored where it was sent: the rewrites, in one place.

- Half message: a prepared transactional message is parked in `RMQ_SYS_TRANS_HALF_TOPIC`
  queue 0 until END_TRANSACTION commits it (`from_half_message` reads its real place back).
- Delay: a message with a delay level (its DELAY property, a consumer's send-back) is parked in
  `SCHEDULE_TOPIC_XXXX`, queue `level - 1`, the level lowered to the highest the broker has
  (`message_delay_level`), as RocketMQ 4.9's commit log does; the schedule service delivers it.
- Retry and dead letter: a message for `%RETRY%<group>` whose reconsume times reached the
  group's limit (its `retryMaxTimes`, or the client's `maxReconsumeTimes` from clients of
  3.4.9 on) goes to `%DLQ%<group>` instead, without a delay, and is not delivered again.

A parked message keeps its real topic and queue in REAL_TOPIC and REAL_QID. The send path, the
send-back, the schedule service and the transactions use these; `stored_again` builds the
record they put again from a stored one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from broker.topic_config import (
    DLQ_GROUP_TOPIC_PREFIX,
    DLQ_NUMS_PER_GROUP,
    PERM_READ,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    TRANS_HALF_TOPIC,
    TopicConfig,
    TopicConfigManager,
)
from protocol.codes import ResponseCode
from protocol.errors import HeaderFieldError
from protocol.properties import MessageConst, decode_properties, encode_properties
from store.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    MessageExtBrokerInner,
    get_transaction_value,
    java_string_hash,
    reset_transaction_value,
)

if TYPE_CHECKING:
    from store.decode import CommitLogRecord

#: clients of 3.4.9 and later send their own maxReconsumeTimes
V3_4_9: Final = 121
_MC = MessageConst
#: the transaction types a delay applies to (a prepared message is parked as a half instead)
_DELAYABLE: Final = (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)


# -- half messages ---------------------------------------------------------------------------


def to_half_message(record: MessageExtBrokerInner, props: dict[str, str]) -> None:
    """Park a prepared transactional `record` in the half topic, queue 0 (`props` are its
    properties, decoded; they are encoded into it again)."""
    props[_MC.REAL_TOPIC] = record.topic
    props[_MC.REAL_QUEUE_ID] = str(record.queue_id)
    record.sys_flag = reset_transaction_value(record.sys_flag, TRANSACTION_NOT_TYPE)
    record.topic = TRANS_HALF_TOPIC
    record.queue_id = 0
    record.properties_string = encode_properties(props)


def from_half_message(props: dict[str, str]) -> tuple[str, int] | None:
    """The real topic and queue of a half message being committed, taken out of its `props`
    with the prepared flag; None when they are missing or malformed."""
    topic, queue_text = props.pop(_MC.REAL_TOPIC, ""), props.pop(_MC.REAL_QUEUE_ID, "")
    if not topic or not queue_text.isdigit():
        return None
    props.pop(_MC.TRANSACTION_PREPARED, None)
    return topic, int(queue_text)


# -- delay levels ----------------------------------------------------------------------------


def delay_level(props: Mapping[str, str]) -> int:
    """The DELAY property (0 without one); MESSAGE_ILLEGAL when it is not an integer."""
    text = props.get(_MC.DELAY_TIME_LEVEL)
    if text is None:
        return 0
    try:
        return int(text)
    except ValueError:
        raise HeaderFieldError(
            "body", f"the DELAY property is not an integer: {text!r}", ResponseCode.MESSAGE_ILLEGAL
        ) from None


def to_schedule(
    props: dict[str, str], topic: str, queue_id: int, level: int, levels_ms: tuple[int, ...]
) -> tuple[str, int]:
    """Park a message for `topic`/`queue_id` at delay `level` (> 0, lowered to the highest of
    `levels_ms`): `props` get the level and the real topic and queue; the schedule topic and
    queue to store it in are returned."""
    level = min(level, len(levels_ms))
    props[_MC.DELAY_TIME_LEVEL] = str(level)
    props[_MC.REAL_TOPIC] = topic
    props[_MC.REAL_QUEUE_ID] = str(queue_id)
    return SCHEDULE_TOPIC, level - 1


def apply_delay(
    record: MessageExtBrokerInner, props: dict[str, str], levels_ms: tuple[int, ...]
) -> None:
    """A sent message with DELAY > 0, not a prepared one, is parked in the schedule topic."""
    if get_transaction_value(record.sys_flag) not in _DELAYABLE:
        return
    level = delay_level(props)
    if level <= 0:
        return
    record.topic, record.queue_id = to_schedule(
        props, record.topic, record.queue_id, level, levels_ms
    )
    record.properties_string = encode_properties(props)


#: a RocketMQ 5 message's delivery time, ms since the epoch (5.x's `TIMER_DELIVER_MS`)
TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"


def timer_level(wait_ms: int, levels_ms: tuple[int, ...]) -> int:
    """The level to park a message due in `wait_ms` (> 0) at: the longest not past its time,
    else the shortest (late by less than the shortest delay)."""
    fitting = [level for level, delay in enumerate(levels_ms, start=1) if delay <= wait_ms]
    return fitting[-1] if fitting else 1


def delivery_record(
    record: CommitLogRecord, now_ms: int = 0, levels_ms: tuple[int, ...] = ()
) -> MessageExtBrokerInner | None:
    """The message to put when `record` (in SCHEDULE_TOPIC_XXXX) is due: its real topic and
    queue, without the delay; None when they are missing or malformed. A message with a
    delivery time (TIMER_DELIVER_MS) still ahead of `now_ms` is parked again, at the level
    `timer_level` picks, so it reaches its topic at its time through a chain of levels."""
    props = decode_properties(record.properties)
    topic = props.get(_MC.REAL_TOPIC)
    queue_text = props.get(_MC.REAL_QUEUE_ID, "")
    if not topic or not queue_text.isdigit() or record.body is None:
        return None
    deliver_text = props.get(TIMER_DELIVER_MS, "")
    if levels_ms and deliver_text.isdigit() and int(deliver_text) > now_ms:
        level = timer_level(int(deliver_text) - now_ms, levels_ms)
        schedule_topic, schedule_queue = to_schedule(
            props, topic, int(queue_text), level, levels_ms
        )
        return stored_again(
            record,
            props,
            schedule_topic,
            schedule_queue,
            store_host=record.store_host,
            reconsume_times=record.reconsume_times,
        )
    props.pop(_MC.DELAY_TIME_LEVEL, None)
    return stored_again(
        record,
        props,
        topic,
        int(queue_text),
        store_host=record.store_host,
        reconsume_times=record.reconsume_times,
    )


# -- retry and dead letter -------------------------------------------------------------------


def retry_group(topic: str) -> str | None:
    """The group of a `%RETRY%<group>` topic; None for any other topic."""
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
    return None


def past_retry_limit(
    reconsume_times: int, group_max: int, version: int, client_max: int | None
) -> bool:
    """True when a message consumed `reconsume_times` times goes to the dead-letter topic: the
    group's `retryMaxTimes`, or the client's own limit from clients of 3.4.9 on, is reached."""
    limit = group_max
    if version >= V3_4_9 and client_max is not None:
        limit = client_max
    return reconsume_times >= limit


def drop_delay(props: dict[str, str]) -> None:
    """No delay level: a dead-lettered message is not delivered again, and a sent-back one
    takes the request's level, not the one it was stored with."""
    props.pop(_MC.DELAY_TIME_LEVEL, None)


def send_back_topic(
    topics: TopicConfigManager, topic: str, queue_nums: int
) -> tuple[TopicConfig, bool]:
    """A retry or dead-letter topic, created with `queue_nums` queues (read-write) if unknown;
    whether it was created (the table is then to be persisted). Raises `HeaderFieldError`
    when the topic cannot be created."""
    found = topics.find(topic)
    if found is not None:
        return found, False
    return topics.create_in_send_back(topic, queue_nums, PERM_READ | PERM_WRITE, 0), True


def dead_letter_topic(topics: TopicConfigManager, group: str) -> tuple[TopicConfig, bool]:
    """`%DLQ%<group>` (created with its one queue if unknown) and whether it was created."""
    return send_back_topic(topics, DLQ_GROUP_TOPIC_PREFIX + group, DLQ_NUMS_PER_GROUP)


# -- stored again ----------------------------------------------------------------------------


def stored_again(
    record: CommitLogRecord,
    props: dict[str, str],
    topic: str,
    queue_id: int,
    *,
    store_host: tuple[str, int],
    reconsume_times: int,
) -> MessageExtBrokerInner:
    """`record` put again under `topic`/`queue_id` with `props` (a delayed delivery, a retry,
    a committed half): its body, flags and born fields kept, acknowledged without waiting for
    the flush."""
    tags = props.get(_MC.TAGS)
    return MessageExtBrokerInner(
        topic=topic,
        queue_id=queue_id,
        body=record.body or b"",
        properties_string=encode_properties(props),
        sys_flag=record.sys_flag,
        flag=record.flag,
        born_timestamp=record.born_timestamp,
        born_host=record.born_host,
        store_host=store_host,
        reconsume_times=reconsume_times,
        wait_store_msg_ok=False,
        tags_code=java_string_hash(tags) if tags else 0,
    )
