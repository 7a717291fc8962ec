"""Typed headers of the consumer, offset, route and client-lifecycle requests.

These are off the send hot path, so they share one table-driven codec: each class lists its
wire fields as `(wire name, kind, required)`; the attribute is the snake_case of the wire name.
Re-exported by `headers.py`, which is where callers import them from.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Self

from ._fields import bool_text, parse_bool, parse_int, parse_long
from .errors import HeaderFieldError

STR: Final = "str"
INT: Final = "int"
LONG: Final = "long"
BOOL: Final = "bool"
_PARSERS: Final[dict[str, Callable[[str, str], object]]] = {
    STR: lambda _field, text: text,
    INT: parse_int,
    LONG: parse_long,
    BOOL: lambda _field, text: parse_bool(text),
}
_Spec = tuple[tuple[str, str, str, bool], ...]  # attribute, wire name, kind, required


def _spec(*fields: tuple[str, str, bool]) -> _Spec:
    return tuple(
        (re.sub(r"(?<!^)(?=[A-Z])", "_", wire).lower(), wire, kind, required)
        for wire, kind, required in fields
    )


class _ExtFieldsHeader:
    __slots__ = ()
    WIRE_FIELDS: ClassVar[_Spec] = ()

    @classmethod
    def from_ext_fields(cls, ext_fields: Mapping[str, str]) -> Self:
        """Parse the wire fields; `HeaderFieldError` names a missing or malformed one."""
        values: dict[str, Any] = {}
        for attribute, wire, kind, is_required in cls.WIRE_FIELDS:
            text = ext_fields.get(wire)
            if text is None:
                if is_required:
                    raise HeaderFieldError.missing(wire)
                continue
            values[attribute] = _PARSERS[kind](wire, text)
        return cls(**values)

    def to_ext_fields(self) -> dict[str, str]:
        result: dict[str, str] = {}
        for attribute, wire, _kind, _required in self.WIRE_FIELDS:
            value = getattr(self, attribute)
            if value is not None:
                result[wire] = bool_text(value) if isinstance(value, bool) else str(value)
        return result


@dataclass(frozen=True, slots=True)
class PullMessageRequestHeader(_ExtFieldsHeader):
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_millis: int
    sub_version: int
    subscription: str | None = None
    expression_type: str | None = None
    WIRE_FIELDS: ClassVar[_Spec] = _spec(
        ("consumerGroup", STR, True),
        ("topic", STR, True),
        ("queueId", INT, True),
        ("queueOffset", LONG, True),
        ("maxMsgNums", INT, True),
        ("sysFlag", INT, True),
        ("commitOffset", LONG, True),
        ("suspendTimeoutMillis", LONG, True),
        ("subVersion", LONG, True),
        ("subscription", STR, False),
        ("expressionType", STR, False),
    )


@dataclass(frozen=True, slots=True)
class PullMessageResponseHeader(_ExtFieldsHeader):
    suggest_which_broker_id: int
    next_begin_offset: int
    min_offset: int
    max_offset: int
    WIRE_FIELDS: ClassVar[_Spec] = _spec(
        ("suggestWhichBrokerId", LONG, True),
        ("nextBeginOffset", LONG, True),
        ("minOffset", LONG, True),
        ("maxOffset", LONG, True),
    )


@dataclass(frozen=True, slots=True)
class QueryConsumerOffsetRequestHeader(_ExtFieldsHeader):
    consumer_group: str
    topic: str
    queue_id: int
    WIRE_FIELDS: ClassVar[_Spec] = _spec(
        ("consumerGroup", STR, True), ("topic", STR, True), ("queueId", INT, True)
    )


@dataclass(frozen=True, slots=True)
class QueryConsumerOffsetResponseHeader(_ExtFieldsHeader):
    offset: int
    WIRE_FIELDS: ClassVar[_Spec] = _spec(("offset", LONG, True))


@dataclass(frozen=True, slots=True)
class UpdateConsumerOffsetRequestHeader(_ExtFieldsHeader):
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int
    WIRE_FIELDS: ClassVar[_Spec] = _spec(
        ("consumerGroup", STR, True),
        ("topic", STR, True),
        ("queueId", INT, True),
        ("commitOffset", LONG, True),
    )


@dataclass(frozen=True, slots=True)
class GetConsumerListByGroupRequestHeader(_ExtFieldsHeader):
    consumer_group: str
    WIRE_FIELDS: ClassVar[_Spec] = _spec(("consumerGroup", STR, True))


@dataclass(frozen=True, slots=True)
class GetMaxOffsetRequestHeader(_ExtFieldsHeader):
    topic: str
    queue_id: int
    WIRE_FIELDS: ClassVar[_Spec] = _spec(("topic", STR, True), ("queueId", INT, True))


@dataclass(frozen=True, slots=True)
class GetMinOffsetRequestHeader(_ExtFieldsHeader):
    topic: str
    queue_id: int
    WIRE_FIELDS: ClassVar[_Spec] = _spec(("topic", STR, True), ("queueId", INT, True))


@dataclass(frozen=True, slots=True)
class SearchOffsetByTimestampRequestHeader(_ExtFieldsHeader):
    """SEARCH_OFFSET_BY_TIMESTAMP (29); upstream's `SearchOffsetRequestHeader`."""

    topic: str
    queue_id: int
    timestamp: int
    WIRE_FIELDS: ClassVar[_Spec] = _spec(
        ("topic", STR, True), ("queueId", INT, True), ("timestamp", LONG, True)
    )


@dataclass(frozen=True, slots=True)
class _OffsetResponseHeader(_ExtFieldsHeader):
    offset: int
    WIRE_FIELDS: ClassVar[_Spec] = _spec(("offset", LONG, True))


@dataclass(frozen=True, slots=True)
class GetMaxOffsetResponseHeader(_OffsetResponseHeader):
    pass


@dataclass(frozen=True, slots=True)
class GetMinOffsetResponseHeader(_OffsetResponseHeader):
    pass


@dataclass(frozen=True, slots=True)
class SearchOffsetByTimestampResponseHeader(_OffsetResponseHeader):
    pass


@dataclass(frozen=True, slots=True)
class ConsumerSendMsgBackRequestHeader(_ExtFieldsHeader):
    offset: int
    group: str
    delay_level: int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None
    WIRE_FIELDS: ClassVar[_Spec] = _spec(
        ("offset", LONG, True),
        ("group", STR, True),
        ("delayLevel", INT, True),
        ("originMsgId", STR, False),
        ("originTopic", STR, False),
        ("unitMode", BOOL, False),
        ("maxReconsumeTimes", INT, False),
    )


@dataclass(frozen=True, slots=True)
class GetRouteInfoRequestHeader(_ExtFieldsHeader):
    """GET_ROUTEINFO_BY_TOPIC (105); acceptStandardJsonOnly is sent by 4.9.4+ clients."""

    topic: str
    accept_standard_json_only: bool | None = None
    WIRE_FIELDS: ClassVar[_Spec] = _spec(
        ("topic", STR, True), ("acceptStandardJsonOnly", BOOL, False)
    )


@dataclass(frozen=True, slots=True)
class UnregisterClientRequestHeader(_ExtFieldsHeader):
    client_id: str
    producer_group: str | None = None
    consumer_group: str | None = None
    WIRE_FIELDS: ClassVar[_Spec] = (
        ("client_id", "clientID", STR, True),
        *_spec(("producerGroup", STR, False), ("consumerGroup", STR, False)),
    )
