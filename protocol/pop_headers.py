"""Headers of RocketMQ 5's pop consumption: POP_MESSAGE (200050), ACK_MESSAGE (200051) and
CHANGE_MESSAGE_INVISIBLETIME (200053), with 5.x's wire names and required fields.

They share the codec of `consumer_headers` (wire name from the attribute, kind from the
annotation, a field without a default is required). Times are in milliseconds; `extra_info`
is the receipt handle a popped message carries in its POP_CK property (`broker.pop.receipt`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .consumer_headers import Group, Long, _ExtFieldsHeader


@dataclass(frozen=True, slots=True)
class PopMessageRequestHeader(_ExtFieldsHeader):
    consumer_group: Group
    topic: str
    #: -1: any queue of the topic
    queue_id: int
    max_msg_nums: int
    invisible_time: Long
    #: how long the broker may hold the request when nothing is there
    poll_time: Long
    born_time: Long
    #: where a group without a pop offset starts: 0 the first message, 1 past the last
    init_mode: int
    exp_type: str | None = None
    exp: str | None = None
    order: bool = False
    attempt_id: str | None = None


@dataclass(frozen=True, slots=True)
class PopMessageResponseHeader(_ExtFieldsHeader):
    pop_time: Long
    invisible_time: Long
    revive_qid: int
    rest_num: Long
    start_offset_info: str | None = None
    msg_offset_info: str | None = None
    order_count_info: str | None = None


@dataclass(frozen=True, slots=True)
class AckMessageRequestHeader(_ExtFieldsHeader):
    consumer_group: Group
    topic: str
    queue_id: int
    extra_info: str
    offset: Long


@dataclass(frozen=True, slots=True)
class ChangeInvisibleTimeRequestHeader(_ExtFieldsHeader):
    consumer_group: Group
    topic: str
    queue_id: int
    extra_info: str
    offset: Long
    invisible_time: Long


@dataclass(frozen=True, slots=True)
class ChangeInvisibleTimeResponseHeader(_ExtFieldsHeader):
    pop_time: Long
    invisible_time: Long
    revive_qid: int
