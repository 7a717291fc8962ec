"""Typed custom headers: the request/response fields carried as strings in `extFields`.

Each header is a frozen slotted dataclass with snake_case fields; `from_ext_fields` parses the
wire names (`producerGroup`, or the letters of `SendMessageRequestHeaderV2`) and raises
`HeaderFieldError` naming the field for a missing required or a malformed value;
`to_ext_fields` writes every non-None field as a string (RocketMQ's `makeCustomHeaderToNet`).
The send headers are on the broker's hot path and are parsed field by field; the rest share
a table-driven codec in `consumer_headers.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Final

from ._fields import (
    bool_text,
    optional_int,
    parse_bool,
    parse_int,
    parse_long,
)
from .codes import RequestCode
from .consumer_headers import (
    ConsumerSendMsgBackRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    GetRouteInfoRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    SearchOffsetByTimestampRequestHeader,
    SearchOffsetByTimestampResponseHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from .errors import HeaderFieldError

__all__ = [
    "SEND_HEADER_V1_NAMES",
    "SEND_HEADER_V2_NAMES",
    "ConsumerSendMsgBackRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetMaxOffsetRequestHeader",
    "GetMaxOffsetResponseHeader",
    "GetMinOffsetRequestHeader",
    "GetMinOffsetResponseHeader",
    "GetRouteInfoRequestHeader",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "SearchOffsetByTimestampRequestHeader",
    "SearchOffsetByTimestampResponseHeader",
    "SendMessageRequestHeader",
    "SendMessageRequestHeaderV2",
    "SendMessageResponseHeader",
    "UnregisterClientRequestHeader",
    "UpdateConsumerOffsetRequestHeader",
    "decode_send_header",
]

# Wire names of the send header fields in one order, V1 spelled out and V2's letters.
# The letters are not alphabetical past `k`: l is maxReconsumeTimes, m is batch.
_V1_NAMES: Final = (
    "producerGroup",
    "topic",
    "defaultTopic",
    "defaultTopicQueueNums",
    "queueId",
    "sysFlag",
    "bornTimestamp",
    "flag",
    "properties",
    "reconsumeTimes",
    "unitMode",
    "maxReconsumeTimes",
    "batch",
    "bname",
)
_V2_NAMES: Final = tuple("abcdefghijklmn")
#: public for tools and tests that build send headers field by field
SEND_HEADER_V1_NAMES: Final = _V1_NAMES
SEND_HEADER_V2_NAMES: Final = _V2_NAMES
#: request codes whose send header travels as V2 letters (SendMessageProcessor.parseRequestHeader)
_V2_CODES: Final = frozenset(
    {RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2}
)

_SendFields = tuple[
    str,
    str,
    str,
    int,
    int,
    int,
    int,
    int,
    str | None,
    int | None,
    bool,
    int | None,
    bool,
    str | None,
]


def _parse_send_fields(ext_fields: Mapping[str, str], names: tuple[str, ...]) -> _SendFields:
    (
        group,
        topic,
        default_topic,
        queue_nums,
        queue_id,
        sys_flag,
        born,
        flag,
        properties,
        reconsume,
        unit_mode,
        max_reconsume,
        batch,
        bname,
    ) = map(ext_fields.get, names)
    if (
        group is None
        or topic is None
        or default_topic is None
        or queue_nums is None
        or queue_id is None
        or sys_flag is None
        or born is None
        or flag is None
    ):
        missing = next(name for name in names[:8] if name not in ext_fields)
        raise HeaderFieldError.missing(missing)
    # Hot path: when every integer is a short run of ASCII digits (what clients send), int()
    # alone is exact; otherwise each goes through the checked Java-style parse.
    small = queue_nums + queue_id + sys_flag + flag + (reconsume or "")
    digits = small + born
    if (
        queue_nums
        and queue_id
        and sys_flag
        and flag
        and born
        and reconsume != ""
        and len(small) < 10  # so each int field has at most 9 digits: within int32
        and len(born) < 19  # within int64
        and digits.isdigit()
        and digits.isascii()
    ):
        return (
            group,
            topic,
            default_topic,
            int(queue_nums),
            int(queue_id),
            int(sys_flag),
            int(born),
            int(flag),
            properties,
            None if reconsume is None else int(reconsume),
            unit_mode is not None and unit_mode != "false" and parse_bool(unit_mode),
            None if max_reconsume is None else parse_int(names[11], max_reconsume),
            batch is not None and batch != "false" and parse_bool(batch),
            bname,
        )
    return (
        group,
        topic,
        default_topic,
        parse_int(names[3], queue_nums),
        parse_int(names[4], queue_id),
        parse_int(names[5], sys_flag),
        parse_long(names[6], born),
        parse_int(names[7], flag),
        properties,
        optional_int(names[9], reconsume),
        parse_bool(unit_mode),
        None if max_reconsume is None else parse_int(names[11], max_reconsume),
        parse_bool(batch),
        bname,
    )


def _send_ext_fields(fields: _SendFields, names: tuple[str, ...]) -> dict[str, str]:
    result: dict[str, str] = {}
    for name, value in zip(names, fields, strict=True):
        if value is None:
            continue
        result[name] = bool_text(value) if isinstance(value, bool) else str(value)
    return result


@dataclass(frozen=True, slots=True)
class SendMessageRequestHeader:
    """SEND_MESSAGE (10) header, and the form every send header is processed in."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None
    batch: bool = False
    bname: str | None = None

    @classmethod
    def from_ext_fields(cls, ext_fields: Mapping[str, str]) -> SendMessageRequestHeader:
        return cls(*_parse_send_fields(ext_fields, _V1_NAMES))

    def to_ext_fields(self) -> dict[str, str]:
        return _send_ext_fields(_send_tuple(self), _V1_NAMES)


@dataclass(frozen=True, slots=True)
class SendMessageRequestHeaderV2:
    """SEND_MESSAGE_V2 (310) / SEND_BATCH_MESSAGE (320) header: V1's fields under letters."""

    a: str  # producerGroup
    b: str  # topic
    c: str  # defaultTopic
    d: int  # defaultTopicQueueNums
    e: int  # queueId
    f: int  # sysFlag
    g: int  # bornTimestamp
    h: int  # flag
    i: str | None = None  # properties
    j: int | None = None  # reconsumeTimes
    k: bool = False  # unitMode
    l: int | None = None  # maxReconsumeTimes  # noqa: E741
    m: bool = False  # batch
    n: str | None = None  # bname

    @classmethod
    def from_ext_fields(cls, ext_fields: Mapping[str, str]) -> SendMessageRequestHeaderV2:
        return cls(*_parse_send_fields(ext_fields, _V2_NAMES))

    def to_ext_fields(self) -> dict[str, str]:
        return _send_ext_fields(_send_tuple(self), _V2_NAMES)

    def to_v1(self) -> SendMessageRequestHeader:
        return SendMessageRequestHeader(*_send_tuple(self))

    @classmethod
    def from_v1(cls, header: SendMessageRequestHeader) -> SendMessageRequestHeaderV2:
        return cls(*_send_tuple(header))


def _send_tuple(header: SendMessageRequestHeader | SendMessageRequestHeaderV2) -> _SendFields:
    if isinstance(header, SendMessageRequestHeaderV2):
        h = header
        return (h.a, h.b, h.c, h.d, h.e, h.f, h.g, h.h, h.i, h.j, h.k, h.l, h.m, h.n)
    v = header
    return (
        v.producer_group,
        v.topic,
        v.default_topic,
        v.default_topic_queue_nums,
        v.queue_id,
        v.sys_flag,
        v.born_timestamp,
        v.flag,
        v.properties,
        v.reconsume_times,
        v.unit_mode,
        v.max_reconsume_times,
        v.batch,
        v.bname,
    )


def decode_send_header(code: int, ext_fields: Mapping[str, str]) -> SendMessageRequestHeader:
    """The V1 header of a send request: V2 letters for codes 310/320/325, V1 names otherwise.

    Raises `HeaderFieldError` naming the wire field (a letter for V2) that is missing or bad.
    """
    names = _V2_NAMES if code in _V2_CODES else _V1_NAMES
    values = _parse_send_fields(ext_fields, names)
    if _COMPILED_V1:
        return SendMessageRequestHeader(*values)
    header = _new_v1(SendMessageRequestHeader)
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13 = _V1_SETTERS
    v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13 = values
    s0(header, v0)
    s1(header, v1)
    s2(header, v2)
    s3(header, v3)
    s4(header, v4)
    s5(header, v5)
    s6(header, v6)
    s7(header, v7)
    s8(header, v8)
    s9(header, v9)
    s10(header, v10)
    s11(header, v11)
    s12(header, v12)
    s13(header, v13)
    return header


# The generated __init__ of a frozen dataclass pays object.__setattr__ per field (1.5 us for
# these 14); writing the slots through their descriptors gives the same object for 0.7 us.
_new_v1 = object.__new__
_V1_SETTERS: Final[tuple[Callable[[object, object], None], ...]] = tuple(
    vars(SendMessageRequestHeader)[f.name].__set__ for f in fields(SendMessageRequestHeader)
)


def _compiled(cls: type) -> bool:
    try:
        _new_v1(cls)
    except TypeError:  # "object.__new__(X) is not safe": only X's own constructor makes one
        return True
    return False


#: True in a mypyc build (bench/mypyc_build.py), whose compiled class cannot be made without its
#: constructor, and whose constructor sets the fields natively, faster than the setters above.
_COMPILED_V1: Final = _compiled(SendMessageRequestHeader)


@dataclass(frozen=True, slots=True)
class SendMessageResponseHeader:
    """Send response: offset msg id(s), queue used, consume-queue offset of the (first) message."""

    msg_id: str
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None

    @classmethod
    def from_ext_fields(cls, ext_fields: Mapping[str, str]) -> SendMessageResponseHeader:
        get = ext_fields.get
        msg_id, queue_id, queue_offset = get("msgId"), get("queueId"), get("queueOffset")
        if msg_id is None or queue_id is None or queue_offset is None:
            missing = next(n for n in ("msgId", "queueId", "queueOffset") if n not in ext_fields)
            raise HeaderFieldError.missing(missing)
        return cls(
            msg_id,
            parse_int("queueId", queue_id),
            parse_long("queueOffset", queue_offset),
            get("transactionId"),
        )

    def to_ext_fields(self) -> dict[str, str]:
        result = {
            "msgId": self.msg_id,
            "queueId": str(self.queue_id),
            "queueOffset": str(self.queue_offset),
        }
        if self.transaction_id is not None:
            result["transactionId"] = self.transaction_id
        return result
