"""Headers and bodies of the topic and broker admin requests, as RocketMQ 4.9 writes them.

Headers (extFields): UPDATE_AND_CREATE_TOPIC's `CreateTopicRequestHeader`, DELETE_TOPIC_IN_BROKER,
GET_TOPIC_STATS_INFO, GET_TOPICS_BY_CLUSTER, DELETE_TOPIC_IN_NAMESRV, WIPE/ADD_WRITE_PERM_OF_BROKER
and GET_BROKER_CONFIG's response. Bodies, in fastjson's shapes (`protocol.fastjson`):
`TopicConfigSerializeWrapper` (GET_ALL_TOPIC_CONFIG), `TopicStatsTable` (GET_TOPIC_STATS_INFO, a
`MessageQueue` object as each map key), `TopicList` (206, 224) and `KVTable`
(GET_BROKER_RUNTIME_INFO); UPDATE/GET_BROKER_CONFIG carry Java properties text
(`properties_text`, `parse_properties`). Decoding a body checks each field's JSON type and
raises `HeaderFieldError` (field "body") naming what is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ._json_body import JsonObject
from .consumer_headers import _ExtFieldsHeader
from .errors import HeaderFieldError
from .fastjson import FastjsonError, ObjectKey, dumps, loads

TOPIC_FILTER_TYPES: Final = ("SINGLE_TAG", "MULTI_TAG")


@dataclass(frozen=True, slots=True)
class CreateTopicRequestHeader(_ExtFieldsHeader):
    """UPDATE_AND_CREATE_TOPIC (17); `defaultTopic` is required on the wire but unused."""

    topic: str
    default_topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_filter_type: str
    topic_sys_flag: int | None = None
    order: bool = False


@dataclass(frozen=True, slots=True)
class TopicRequestHeader(_ExtFieldsHeader):
    """DELETE_TOPIC_IN_BROKER (215) and GET_TOPIC_STATS_INFO (202): one topic."""

    topic: str


@dataclass(frozen=True, slots=True)
class GetTopicsByClusterRequestHeader(_ExtFieldsHeader):
    cluster: str


@dataclass(frozen=True, slots=True)
class DeleteTopicFromNamesrvRequestHeader(_ExtFieldsHeader):
    topic: str
    cluster_name: str | None = None


@dataclass(frozen=True, slots=True)
class BrokerNameRequestHeader(_ExtFieldsHeader):
    """WIPE_WRITE_PERM_OF_BROKER (205) and ADD_WRITE_PERM_OF_BROKER (327)."""

    broker_name: str


@dataclass(frozen=True, slots=True)
class WipeWritePermOfBrokerResponseHeader(_ExtFieldsHeader):
    wipe_topic_count: int


@dataclass(frozen=True, slots=True)
class AddWritePermOfBrokerResponseHeader(_ExtFieldsHeader):
    add_topic_count: int


@dataclass(frozen=True, slots=True)
class GetBrokerConfigResponseHeader(_ExtFieldsHeader):
    """`version` is the configuration's DataVersion as JSON text."""

    version: str


def _standard(body: Mapping[str, object]) -> bytes:
    """A body with string keys and no nulls: fastjson's text is standard JSON, keys sorted,
    which the C encoder writes (a 10,000-topic table in a fraction of `dumps`' time)."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _load(body: bytes | None, what: str) -> JsonObject:
    try:
        value = loads(body or b"")
    except FastjsonError as exc:
        raise HeaderFieldError("body", f"{what} body is not valid JSON: {exc}") from None
    if type(value) is not dict:
        raise HeaderFieldError("body", f"{what} body is not a JSON object")
    return JsonObject(value, what)


@dataclass(frozen=True, slots=True)
class DataVersion:
    counter: int
    timestamp: int

    def to_dict(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def read(cls, d: JsonObject) -> DataVersion:
        return cls(d.long("counter", 0), d.long("timestamp", 0))


@dataclass(frozen=True, slots=True)
class TopicConfigData:
    """One `TopicConfig` as the wire carries it."""

    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def read(cls, d: JsonObject) -> TopicConfigData:
        return cls(
            d.text("topicName"),
            d.int32("readQueueNums", 16),
            d.int32("writeQueueNums", 16),
            d.int32("perm", 6),
            d.enum_name("topicFilterType", TOPIC_FILTER_TYPES, 0),
            d.int32("topicSysFlag", 0),
            d.boolean("order"),
        )


@dataclass(frozen=True, slots=True)
class TopicConfigSerializeWrapper:
    """GET_ALL_TOPIC_CONFIG (21): every topic of the broker and the table's data version."""

    topic_config_table: dict[str, TopicConfigData]
    data_version: DataVersion

    def to_json(self) -> bytes:
        table = {name: topic.to_dict() for name, topic in self.topic_config_table.items()}
        body = {"dataVersion": self.data_version.to_dict(), "topicConfigTable": table}
        return _standard(body)

    @classmethod
    def from_json(cls, body: bytes | None) -> TopicConfigSerializeWrapper:
        d = _load(body, "topic config")
        table = d.child("topicConfigTable")
        topics = {
            name: TopicConfigData.read(table.object_value(name, value))
            for name, value in table.entries()
        }
        return cls(topics, DataVersion.read(d.child("dataVersion")))


_NOT_A_QUEUE: Final = "is a map key that is not a MessageQueue object"


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def key(self) -> ObjectKey:
        return ObjectKey.of(
            {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}
        )

    def to_json(self) -> dict[str, Any]:
        return self.key().fields

    @classmethod
    def read(cls, d: JsonObject) -> MessageQueue:
        return cls(d.text("topic"), d.text("brokerName"), d.int32("queueId"))

    @classmethod
    def from_key(cls, table: JsonObject, key: object) -> MessageQueue:
        """A map key written as a MessageQueue object (fastjson), or as its JSON text (a
        standard-JSON writer stringifies the key)."""
        if isinstance(key, str):
            text = key
            try:
                key = ObjectKey.of(loads(text))
            except (FastjsonError, AttributeError, TypeError):
                raise table.error(text[:64], _NOT_A_QUEUE) from None
        if not isinstance(key, ObjectKey):
            raise table.error(str(key)[:64], _NOT_A_QUEUE)
        return cls.read(JsonObject(key.fields, table.what, table.field("<key>")))


@dataclass(frozen=True, slots=True)
class TopicOffset:
    min_offset: int
    max_offset: int
    last_update_timestamp: int

    def to_dict(self) -> dict[str, int]:
        return {
            "lastUpdateTimestamp": self.last_update_timestamp,
            "maxOffset": self.max_offset,
            "minOffset": self.min_offset,
        }


@dataclass(frozen=True, slots=True)
class TopicStatsTable:
    """GET_TOPIC_STATS_INFO (202): min/max offset and last store time per queue."""

    offset_table: dict[MessageQueue, TopicOffset]

    def to_json(self) -> bytes:
        table = {mq.key(): offset.to_dict() for mq, offset in self.offset_table.items()}
        return dumps({"offsetTable": table}).encode()

    @classmethod
    def from_json(cls, body: bytes | None) -> TopicStatsTable:
        d = _load(body, "topic stats")
        table = d.child("offsetTable")
        result: dict[MessageQueue, TopicOffset] = {}
        for key, value in table.entries():
            mq = MessageQueue.from_key(table, key)
            item = table.object_value(f"{mq.broker_name}/{mq.topic}/{mq.queue_id}", value)
            result[mq] = TopicOffset(
                item.long("minOffset", 0),
                item.long("maxOffset", 0),
                item.long("lastUpdateTimestamp", 0),
            )
        return cls(result)


@dataclass(frozen=True, slots=True)
class TopicList:
    """GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), GET_TOPICS_BY_CLUSTER (224)."""

    topic_list: frozenset[str]
    broker_addr: str | None = None

    def to_json(self) -> bytes:
        body: dict[str, object] = {"topicList": sorted(self.topic_list)}
        if self.broker_addr is not None:
            body["brokerAddr"] = self.broker_addr
        return _standard(body)

    @classmethod
    def from_json(cls, body: bytes | None) -> TopicList:
        d = _load(body, "topic list")
        return cls(frozenset(d.items("topicList", d.text_value)), d.optional_text("brokerAddr"))


@dataclass(frozen=True, slots=True)
class KVTable:
    """GET_BROKER_RUNTIME_INFO (28): names to values, all text."""

    table: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return _standard({"table": self.table})

    @classmethod
    def from_json(cls, body: bytes | None) -> KVTable:
        d = _load(body, "kv table")
        table = d.child("table")
        return cls({k: table.text_value(k, v) for k, v in table.entries()})


_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def properties_text(values: Mapping[str, str]) -> bytes:
    """`key=value` lines, as RocketMQ's `MixAll.properties2String` writes them."""
    return "".join(f"{key}={value}\n" for key, value in values.items()).encode()


def parse_properties(body: bytes | None) -> dict[str, str]:
    """Java properties text (`key=value` or `key:value` lines, `#`/`!` comments, backslash
    escapes); `HeaderFieldError` for text that is not UTF-8 or a line without a key."""
    try:
        text = (body or b"").decode()
    except UnicodeDecodeError as exc:
        raise HeaderFieldError("body", f"properties body is not UTF-8: {exc}") from None
    result: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        key, value = (line, "") if cut < 0 else (line[:cut].strip(), line[cut + 1 :].strip())
        if not key:
            raise HeaderFieldError("body", f"properties line {number} has no key: {raw[:64]!r}")
        result[_unescape(key)] = _unescape(value)
    return result


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    chars = iter(text)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        escaped = next(chars, "")
        out.append(_ESCAPES.get(escaped, escaped))
    return "".join(out)
