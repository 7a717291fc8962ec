"""The body of REGISTER_BROKER (103): `RegisterBrokerBody` in both of RocketMQ 4.9's encodings.

Mirrors `common/protocol/body/RegisterBrokerBody.java`. Uncompressed (header `compressed`
false), the body is the fastjson text of the bean:

    {"filterServerList":[...],
     "topicConfigSerializeWrapper":{"dataVersion":{"counter":C,"timestamp":T},
                                    "topicConfigTable":{"<topic>":{<TopicConfig>},...}}}

Compressed, it is one zlib stream (Java's `DeflaterOutputStream`, best compression) of
length-prefixed parts, each length a big-endian int32:

    int32  dataVersion length | dataVersion JSON
    int32  topic count        | per topic: int32 length | "<name> <read> <write> <perm> <filter>"
    int32  filter list length | filterServerList JSON array

A topic in the compressed form carries only what `TopicConfig.encode` writes (no sysFlag, no
order flag), so the name server sees topicSysFlag 0 for it, as a 4.9 name server does.
Decoding is bounded by the caller (`max_topics`, `max_inflated` bytes), checks every length
against what is left, and raises `HeaderFieldError` (field "body", SYSTEM_ERROR) naming the
part that is wrong; nothing else escapes it.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import Final

from ._fields import INT32_MAX, INT32_MIN, parse_int
from ._json_body import JsonObject, load_object
from .admin_topic import TOPIC_FILTER_TYPES, DataVersion, TopicConfigData
from .codes import RequestCode
from .command import RemotingCommand
from .errors import HeaderFieldError
from .names import SUBSCRIPTION_TOPIC_MAX_LENGTH, VALID_NAME_PATTERN
from .namesrv_headers import RegisterBrokerRequestHeader, crc32_of

_INT32: Final = struct.Struct(">i")
#: `Deflater.BEST_COMPRESSION`, what the 4.9 broker compresses with
_LEVEL: Final = 9
_TOPIC_CHARS: Final = frozenset(
    "%|-_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
)
_WHAT: Final = "Failed to decode RegisterBrokerBody"
#: filter servers one registration may list (4.x brokers list none)
MAX_FILTER_SERVERS: Final = 64
_MAX_FILTER_SERVER_LENGTH: Final = 255


def _dumps(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True, slots=True)
class RegisterBrokerBody:
    """A broker's topic table and its data version (and filter servers, unused since 4.x)."""

    topics: tuple[TopicConfigData, ...]
    data_version: DataVersion
    filter_server_list: tuple[str, ...] = field(default=())

    def encode(self, compressed: bool = False) -> bytes:
        """The body as a 4.9 broker writes it; `compressed` as its header will say."""
        if not compressed:
            table = {topic.topic_name: topic.to_dict() for topic in self.topics}
            wrapper = {"dataVersion": self.data_version.to_dict(), "topicConfigTable": table}
            return _dumps(
                {
                    "filterServerList": list(self.filter_server_list),
                    "topicConfigSerializeWrapper": wrapper,
                }
            )
        parts = [_prefixed(_dumps(self.data_version.to_dict())), _INT32.pack(len(self.topics))]
        parts += [_prefixed(_topic_text(topic).encode()) for topic in self.topics]
        parts.append(_prefixed(_dumps(list(self.filter_server_list))))
        return zlib.compress(b"".join(parts), _LEVEL)

    @classmethod
    def decode(
        cls, body: bytes, compressed: bool, *, max_topics: int, max_inflated: int
    ) -> RegisterBrokerBody:
        """Parse either form; `HeaderFieldError` for anything malformed or past the bounds."""
        if compressed:
            return _decode_compressed(_inflate(body, max_inflated), max_topics)
        if len(body) > max_inflated:
            raise _error(f"the body of {len(body)} bytes is over the limit of {max_inflated}")
        d = load_object(body, "register broker")
        wrapper = d.child("topicConfigSerializeWrapper")
        table = wrapper.child("topicConfigTable")
        entries = table.entries()
        _check_count(len(entries), max_topics)
        topics = tuple(
            _checked(_fast_topic(value) or TopicConfigData.read(table.object_value(name, value)))
            for name, value in entries
        )
        servers = _check_servers(tuple(d.items("filterServerList", d.text_value)))
        return cls(topics, DataVersion.read(wrapper.child("dataVersion")), servers)


def register_broker_request(  # noqa: PLR0917 (the header's fields, in 4.9's order)
    cluster: str,
    broker_addr: str,
    broker_name: str,
    broker_id: int,
    ha_server_addr: str,
    body: RegisterBrokerBody,
    *,
    compressed: bool = False,
    opaque: int = 0,
) -> RemotingCommand:
    """REGISTER_BROKER as `BrokerOuterAPI.registerBrokerAll` sends it: the body encoded as the
    header says, `bodyCrc32` of the bytes sent. The answer's ext fields read as
    `RegisterBrokerResponseHeader`, its body (when present) as the ORDER_TOPIC_CONFIG
    `KVTable`."""
    data = body.encode(compressed)
    header = RegisterBrokerRequestHeader(
        broker_name, broker_addr, cluster, ha_server_addr, broker_id, compressed, crc32_of(data)
    )
    return RemotingCommand.request(
        RequestCode.REGISTER_BROKER, header.to_ext_fields(), data, opaque=opaque
    )


def encode_data_version(version: DataVersion) -> bytes:
    """`DataVersion` as fastjson writes it (QUERY_DATA_VERSION's body, both ways)."""
    return _dumps(version.to_dict())


def decode_data_version(body: bytes | None) -> DataVersion:
    """A `DataVersion` body; absent fields are 0, `HeaderFieldError` for one that is not."""
    return DataVersion.read(load_object(body or b"{}", "data version"))


def _fast_topic(value: object) -> TopicConfigData | None:
    """A topic config whose fields all have their Java types and ranges, read without the
    per-field checks of `TopicConfigData.read` (a 10,000-topic registration every 30 s);
    None for anything else, which the checked reader then names."""
    if type(value) is not dict:
        return None
    get = value.get
    name = get("topicName")
    read = get("readQueueNums")
    write = get("writeQueueNums")
    perm = get("perm")
    sys_flag = get("topicSysFlag", 0)
    order = get("order", False)
    filter_type = get("topicFilterType", "SINGLE_TAG")
    if not (
        type(name) is str
        and type(read) is int
        and type(write) is int
        and type(perm) is int
        and type(sys_flag) is int
        and type(order) is bool
        and filter_type in TOPIC_FILTER_TYPES
        and min(read, write, perm, sys_flag) >= INT32_MIN
        and max(read, write, perm, sys_flag) <= INT32_MAX
    ):
        return None
    return TopicConfigData(name, read, write, perm, filter_type, sys_flag, order)


def _prefixed(data: bytes) -> bytes:
    return _INT32.pack(len(data)) + data


def _topic_text(topic: TopicConfigData) -> str:
    """`TopicConfig.encode`: name, read and write queue counts, perm, filter type."""
    return (
        f"{topic.topic_name} {topic.read_queue_nums} {topic.write_queue_nums} {topic.perm} "
        f"{topic.topic_filter_type}"
    )


def _error(problem: str) -> HeaderFieldError:
    return HeaderFieldError("body", f"{_WHAT}: {problem}")


def _inflate(body: bytes, max_inflated: int) -> bytes:
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(body, max_inflated)
    except zlib.error as exc:
        raise _error(f"the compressed body does not inflate: {exc}") from None
    if inflater.unconsumed_tail:
        raise _error(f"the compressed body inflates beyond {max_inflated} bytes")
    if not inflater.eof:
        raise _error("the compressed body is truncated")
    return data


def _check_count(count: int, max_topics: int) -> None:
    if count > max_topics:
        raise _error(f"{count} topics are more than the limit of {max_topics} per registration")


def _checked(topic: TopicConfigData) -> TopicConfigData:
    """The topic, once its name is one a broker could hold (the retry and DLQ topics of the
    longest group included) and its queue counts are not negative."""
    name = topic.topic_name
    if not name or len(name) > SUBSCRIPTION_TOPIC_MAX_LENGTH or not _TOPIC_CHARS.issuperset(name):
        shown = name if len(name) <= 64 else name[:61] + "..."
        raise _error(
            f"topic {shown!r} is not 1 to {SUBSCRIPTION_TOPIC_MAX_LENGTH} characters of "
            f"{VALID_NAME_PATTERN}"
        )
    if topic.read_queue_nums < 0 or topic.write_queue_nums < 0:
        raise _error(f"topic {name} has a negative queue count")
    return topic


class _Reader:
    """Length-prefixed parts of the inflated stream, each length checked against the rest."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def int32(self, what: str) -> int:
        if len(self.data) - self.pos < _INT32.size:
            raise _error(f"the stream ends before the {what}")
        (value,) = _INT32.unpack_from(self.data, self.pos)
        self.pos += _INT32.size
        return int(value)

    def part(self, what: str) -> bytes:
        length = self.int32(f"length of the {what}")
        if not 0 <= length <= len(self.data) - self.pos:
            raise _error(f"the {what} length {length} does not fit the stream")
        part = self.data[self.pos : self.pos + length]
        self.pos += length
        return part

    def text(self, what: str) -> str:
        try:
            return self.part(what).decode()
        except UnicodeDecodeError as exc:
            raise _error(f"the {what} is not UTF-8: {exc}") from None


def _decode_compressed(data: bytes, max_topics: int) -> RegisterBrokerBody:
    reader = _Reader(data)
    version = DataVersion.read(load_object(reader.part("dataVersion"), "register broker"))
    count = reader.int32("topic count")
    if count < 0:
        raise _error(f"the topic count {count} is negative")
    _check_count(count, max_topics)
    topics = tuple(_checked(_parse_topic(reader.text(f"topic {i}"))) for i in range(count))
    servers = _parse_servers(reader.part("filterServerList"))
    if reader.pos != len(data):
        raise _error(f"{len(data) - reader.pos} bytes follow the filterServerList")
    return RegisterBrokerBody(topics, version, servers)


def _parse_topic(text: str) -> TopicConfigData:
    """`TopicConfig.decode`: five fields separated by single spaces."""
    fields = text.split(" ")
    if len(fields) != len(("name", "read", "write", "perm", "filter")):
        raise _error(f"topic config {text[:64]!r} is not 5 fields separated by spaces")
    name, read, write, perm, filter_type = fields
    if filter_type not in TOPIC_FILTER_TYPES:
        raise _error(f"topic {name[:64]} has an unknown filter type {filter_type[:32]!r}")
    try:
        numbers = [parse_int(f"topic {name[:64]}", value) for value in (read, write, perm)]
    except HeaderFieldError as exc:
        raise _error(str(exc)) from None
    return TopicConfigData(name, numbers[0], numbers[1], numbers[2], filter_type)


def _parse_servers(part: bytes) -> tuple[str, ...]:
    try:
        value = json.loads(part.decode() or "[]")
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _error(f"the filterServerList is not JSON: {exc}") from None
    holder = JsonObject({"filterServerList": value}, "register broker")
    return _check_servers(tuple(holder.items("filterServerList", holder.text_value)))


def _check_servers(servers: tuple[str, ...]) -> tuple[str, ...]:
    if len(servers) > MAX_FILTER_SERVERS:
        raise _error(f"{len(servers)} filter servers are more than {MAX_FILTER_SERVERS}")
    if any(len(server) > _MAX_FILTER_SERVER_LENGTH for server in servers):
        raise _error(f"a filter server address is longer than {_MAX_FILTER_SERVER_LENGTH}")
    return servers
