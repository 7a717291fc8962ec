"""The receipt handle of a popped message: RocketMQ 5's "extra info" (its POP_CK property).

Eight fields separated by one space, as 5.x's `ExtraInfoUtil` writes them:

    ckQueueOffset popTime invisibleTime reviveQid retry brokerName queueId queueOffset

`ckQueueOffset` is the first queue offset of the pop that handed the message out (with the
group, topic, queue and pop time it names that pop's checkpoint); `retry` says which topic the
message was read from: 0 the topic itself, 1 the group's pop retry topic `%RETRY%<group>_<topic>`
(2, 5.x's `%RETRY%<group>+<topic>`, is read but never written here). An ACK or a
CHANGE_MESSAGE_INVISIBLETIME names the message by this text, so `parse` takes any string and
raises `ReceiptError` for anything that is not one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from broker.topic_config import RETRY_GROUP_TOPIC_PREFIX

SEPARATOR: Final = " "
NORMAL: Final = "0"
RETRY_V1: Final = "1"
RETRY_V2: Final = "2"
_FIELDS: Final = 8
#: the queues of a group's pop retry topic, made when its first message is revived
POP_RETRY_QUEUE_NUMS: Final = 1
_INT64: Final = 1 << 63
_INT32: Final = 1 << 31


class ReceiptError(ValueError):
    """Text that is not a receipt handle; the message says which part is wrong."""


def pop_retry_topic(topic: str, group: str) -> str:
    """The topic a popped message of `group` goes to when it is not acknowledged in time."""
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}_{topic}"


@dataclass(frozen=True, slots=True)
class Receipt:
    ck_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    retry: str
    broker_name: str
    queue_id: int
    queue_offset: int

    def encode(self) -> str:
        return SEPARATOR.join(
            str(v)
            for v in (
                self.ck_offset,
                self.pop_time,
                self.invisible_time,
                self.revive_qid,
                self.retry,
                self.broker_name,
                self.queue_id,
                self.queue_offset,
            )
        )

    def real_topic(self, topic: str, group: str) -> str:
        """The topic the message was read from, for a request naming `topic` and `group`."""
        if self.retry == RETRY_V1:
            return pop_retry_topic(topic, group)
        if self.retry == RETRY_V2:
            return f"{RETRY_GROUP_TOPIC_PREFIX}{group}+{topic}"
        return topic

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible_time

    @classmethod
    def parse(cls, text: str) -> Receipt:
        """The receipt `text` holds; `ReceiptError` for anything else."""
        parts = text.split(SEPARATOR)
        if len(parts) != _FIELDS:
            raise ReceiptError(f"a receipt handle has {_FIELDS} fields, this one {len(parts)}")
        ck, pop_time, invisible, revive, retry, broker_name, queue_id, offset = parts
        if retry not in (NORMAL, RETRY_V1, RETRY_V2):
            raise ReceiptError(f"unknown topic kind {retry[:16]!r} in the receipt handle")
        if not broker_name:
            raise ReceiptError("the receipt handle names no broker")
        return cls(
            _number("ckQueueOffset", ck, _INT64),
            _number("popTime", pop_time, _INT64),
            _number("invisibleTime", invisible, _INT64),
            _number("reviveQid", revive, _INT32),
            retry,
            broker_name,
            _number("queueId", queue_id, _INT32),
            _number("queueOffset", offset, _INT64),
        )


def retry_kind(topic: str) -> str:
    """The `retry` field for a message read from `topic`."""
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return RETRY_V2 if "+" in topic else RETRY_V1
    return NORMAL


def _number(name: str, text: str, bound: int) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise ReceiptError(f"{name} of the receipt handle is not a number: {text[:32]!r}")
    value = int(text)
    if value >= bound:
        raise ReceiptError(f"{name} of the receipt handle is out of range: {value}")
    return value
