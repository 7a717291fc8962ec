"""Typed headers of the consumer, offset, route and client-lifecycle requests.

These are off the send hot path, so they share one codec driven by the dataclass fields: the wire
name is the attribute in camelCase (`wire_name` where upstream spells it otherwise), the kind
comes from the annotation (`Long` for a Java long, plain `int` for a Java int, `Group` for a
consumer group name and `ClientId` for a client id, which are held to the `names` rules because
the broker keys its tables with them) and a field without a default is required. Re-exported
by `headers.py`, which is where callers import them from.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Self

from ._fields import bool_text, parse_bool, parse_int, parse_long
from .errors import HeaderFieldError
from .names import check_client_id, check_group_name

STR: Final = "str"
INT: Final = "int"
LONG: Final = "long"
BOOL: Final = "bool"
GROUP: Final = "group"
CLIENT_ID: Final = "client_id"
#: PULL_MESSAGE sysFlag bits (upstream's PullSysFlag)
FLAG_COMMIT_OFFSET: Final = 0x1
FLAG_SUSPEND: Final = 0x2
FLAG_SUBSCRIPTION: Final = 0x4
#: a Java `long` field; a plain `int` is a Java `int`, range-checked as int32
Long = Annotated[int, LONG]
#: a consumer group name (`names.check_group_name`)
Group = Annotated[str, GROUP]
#: a client id (`names.check_client_id`)
ClientId = Annotated[str, CLIENT_ID]
_PARSERS: Final[dict[str, Callable[[str, str], object]]] = {
    STR: lambda _field, text: text,
    INT: parse_int,
    LONG: parse_long,
    BOOL: lambda _field, text: parse_bool(text),
    GROUP: check_group_name,
    CLIENT_ID: check_client_id,
}
_KINDS: Final[dict[object, str]] = {str: STR, int: INT, bool: BOOL}
WireFields = tuple[tuple[str, str, str, bool], ...]  # attribute, wire name, kind, required


def wire_name(name: str) -> Any:
    """Field metadata for a wire name that is not the camelCase of the attribute."""
    return field(metadata={"wire": name})


def wire_fields(cls: type) -> WireFields:
    """(attribute, wire name, kind, required) of each field of the header dataclass `cls`."""
    spec = _WIRE_FIELDS.get(cls)
    if spec is None:
        spec = _WIRE_FIELDS[cls] = _derive_wire_fields(cls)
    return spec


_WIRE_FIELDS: Final[dict[type, WireFields]] = {}


def _derive_wire_fields(cls: type) -> WireFields:
    hints = typing.get_type_hints(cls, include_extras=True)
    spec = []
    for f in dataclasses.fields(cls):
        wire = f.metadata.get("wire") or re.sub(r"_([a-z])", lambda m: m[1].upper(), f.name)
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        spec.append((f.name, wire, _kind_of(hints[f.name]), required))
    return tuple(spec)


def _kind_of(hint: Any) -> str:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:  # X | None
        (hint,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if typing.get_origin(hint) is Annotated:
        return str(hint.__metadata__[0])
    return _KINDS[hint]


class _ExtFieldsHeader:
    __slots__ = ()

    @classmethod
    def from_ext_fields(cls, ext_fields: Mapping[str, str]) -> Self:
        """Parse the wire fields; `HeaderFieldError` names a missing or malformed one."""
        values: dict[str, Any] = {}
        for attribute, wire, kind, is_required in wire_fields(cls):
            text = ext_fields.get(wire)
            if text is None:
                if is_required:
                    raise HeaderFieldError.missing(wire)
                continue
            values[attribute] = _PARSERS[kind](wire, text)
        return cls(**values)

    def to_ext_fields(self) -> dict[str, str]:
        result: dict[str, str] = {}
        for attribute, wire, _kind, _required in wire_fields(type(self)):
            value = getattr(self, attribute)
            if value is not None:
                result[wire] = bool_text(value) if isinstance(value, bool) else str(value)
        return result


@dataclass(frozen=True, slots=True)
class PullMessageRequestHeader(_ExtFieldsHeader):
    consumer_group: Group
    topic: str
    queue_id: int
    queue_offset: Long
    max_msg_nums: int
    sys_flag: int
    commit_offset: Long
    suspend_timeout_millis: Long
    sub_version: Long
    subscription: str | None = None
    expression_type: str | None = None


@dataclass(frozen=True, slots=True)
class PullMessageResponseHeader(_ExtFieldsHeader):
    suggest_which_broker_id: Long
    next_begin_offset: Long
    min_offset: Long
    max_offset: Long


@dataclass(frozen=True, slots=True)
class QueryConsumerOffsetRequestHeader(_ExtFieldsHeader):
    consumer_group: Group
    topic: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class UpdateConsumerOffsetRequestHeader(_ExtFieldsHeader):
    consumer_group: Group
    topic: str
    queue_id: int
    commit_offset: Long


@dataclass(frozen=True, slots=True)
class GetConsumerListByGroupRequestHeader(_ExtFieldsHeader):
    consumer_group: Group


@dataclass(frozen=True, slots=True)
class _QueueRequestHeader(_ExtFieldsHeader):
    topic: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class GetMaxOffsetRequestHeader(_QueueRequestHeader):
    pass


@dataclass(frozen=True, slots=True)
class GetMinOffsetRequestHeader(_QueueRequestHeader):
    pass


@dataclass(frozen=True, slots=True)
class SearchOffsetByTimestampRequestHeader(_ExtFieldsHeader):
    """SEARCH_OFFSET_BY_TIMESTAMP (29); upstream's `SearchOffsetRequestHeader`."""

    topic: str
    queue_id: int
    timestamp: Long


@dataclass(frozen=True, slots=True)
class _OffsetResponseHeader(_ExtFieldsHeader):
    offset: Long


@dataclass(frozen=True, slots=True)
class QueryConsumerOffsetResponseHeader(_OffsetResponseHeader):
    pass


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
class QueryMessageRequestHeader(_ExtFieldsHeader):
    """QUERY_MESSAGE (12): messages of a topic by key, stored within a time range (ms)."""

    topic: str
    key: str
    max_num: int
    begin_timestamp: Long
    end_timestamp: Long


@dataclass(frozen=True, slots=True)
class QueryMessageResponseHeader(_ExtFieldsHeader):
    index_last_update_timestamp: Long
    index_last_update_phyoffset: Long


@dataclass(frozen=True, slots=True)
class ViewMessageRequestHeader(_ExtFieldsHeader):
    """VIEW_MESSAGE_BY_ID (33): the commit-log offset an offset message id holds."""

    offset: Long


@dataclass(frozen=True, slots=True)
class ConsumerSendMsgBackRequestHeader(_ExtFieldsHeader):
    offset: Long
    group: Group
    delay_level: int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None


@dataclass(frozen=True, slots=True)
class GetRouteInfoRequestHeader(_ExtFieldsHeader):
    """GET_ROUTEINFO_BY_TOPIC (105); acceptStandardJsonOnly is sent by 4.9.4+ clients."""

    topic: str
    accept_standard_json_only: bool | None = None


@dataclass(frozen=True, slots=True)
class UnregisterClientRequestHeader(_ExtFieldsHeader):
    client_id: ClientId = wire_name("clientID")  # noqa: RUF009 (a dataclasses.field)
    producer_group: str | None = None
    consumer_group: Group | None = None
