"""Headers and bodies of the consumer-group and connection admin requests of RocketMQ 4.9.

UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200, body `SubscriptionGroupConfig`),
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201, `SubscriptionGroupWrapper`), DELETE_SUBSCRIPTIONGROUP
(207), GET_CONSUME_STATS (208, `ConsumeStats`), GET_ALL_CONSUMER_OFFSET (43,
`ConsumerOffsetSerializeWrapper`), GET_CONSUMER_CONNECTION_LIST (203, `ConsumerConnection`),
GET_PRODUCER_CONNECTION_LIST (204, `ProducerConnection`), QUERY_TOPIC_CONSUME_BY_WHO (300,
`GroupList`), INVOKE_BROKER_TO_RESET_OFFSET (222, `ResetOffsetBody`, also the body of the
RESET_CONSUMER_CLIENT_OFFSET the broker sends to clients) and GET_CONSUMER_RUNNING_INFO (307,
whose body the broker relays without reading it).

Bodies are written as 4.9's fastjson writes them (`fastjson`): bean fields in alphabetical
order, enums by name, a `MessageQueue` map key as an object, an `Integer` key as a bare number.
Reading checks every field's JSON type (`_json_body`), so a malformed body is a
`HeaderFieldError` naming the field, never a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from ._fields import INT64_MAX, INT64_MIN, parse_long
from ._json_body import JsonObject
from .admin_topic import MessageQueue as _MessageQueue
from .consumer_headers import ClientId, Group, Long, _ExtFieldsHeader
from .errors import HeaderFieldError
from .fastjson import FastjsonError, dumps, loads
from .names import check_group_name
from .route import SubscriptionData

#: `MixAll.MASTER_ID`
MASTER_ID: Final = 0
DEFAULT_RETRY_MAX_TIMES: Final = 16


def load_value(body: bytes | None, what: str) -> Any:
    """The value a fastjson body holds; `HeaderFieldError` naming `what` when it is not one."""
    try:
        return loads(body or b"")
    except FastjsonError as exc:
        raise HeaderFieldError("body", f"{what} body: {exc}") from None


def encode(value: object) -> bytes:
    """`value` as fastjson's compact UTF-8 text."""
    return dumps(value).encode()


def load(body: bytes | None, what: str) -> JsonObject:
    """A fastjson body that must be an object."""
    value = load_value(body, what)
    if type(value) is not dict:
        raise HeaderFieldError("body", f"{what} body is not a JSON object")
    return JsonObject(value, what)


# -- request headers ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeleteSubscriptionGroupRequestHeader(_ExtFieldsHeader):
    group_name: Group
    remove_offset: bool = False


@dataclass(frozen=True, slots=True)
class GetConsumeStatsRequestHeader(_ExtFieldsHeader):
    consumer_group: Group
    topic: str | None = None


@dataclass(frozen=True, slots=True)
class GetConsumerConnectionListRequestHeader(_ExtFieldsHeader):
    consumer_group: Group


@dataclass(frozen=True, slots=True)
class GetProducerConnectionListRequestHeader(_ExtFieldsHeader):
    producer_group: str


@dataclass(frozen=True, slots=True)
class QueryTopicConsumeByWhoRequestHeader(_ExtFieldsHeader):
    topic: str


@dataclass(frozen=True, slots=True)
class ResetOffsetRequestHeader(_ExtFieldsHeader):
    """INVOKE_BROKER_TO_RESET_OFFSET (222) and RESET_CONSUMER_CLIENT_OFFSET (220); a timestamp
    of -1 means each queue's end."""

    topic: str
    group: Group
    timestamp: Long
    is_force: bool = False


@dataclass(frozen=True, slots=True)
class GetConsumerRunningInfoRequestHeader(_ExtFieldsHeader):
    consumer_group: Group
    client_id: ClientId
    jstack_enable: bool = False


# -- bodies ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """4.9's `SubscriptionGroupConfig`: a consumer group's settings on this broker."""

    group_name: str
    consume_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = DEFAULT_RETRY_MAX_TIMES
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    broker_id: int = MASTER_ID
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    #: RocketMQ 5's FIFO groups: pops hand out a queue's messages one batch at a time, in order
    #: (written only when set: 4.9's tools do not know the field)
    consume_message_orderly: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "brokerId": self.broker_id,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "groupName": self.group_name,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
        }
        if self.consume_message_orderly:
            out["consumeMessageOrderly"] = True
        return out

    @classmethod
    def read(cls, d: JsonObject) -> SubscriptionGroupConfig:
        return cls(
            d.name("groupName", check_group_name),
            d.boolean("consumeEnable", True),
            d.int32("retryQueueNums", 1),
            d.int32("retryMaxTimes", DEFAULT_RETRY_MAX_TIMES),
            d.boolean("consumeFromMinEnable", True),
            d.boolean("consumeBroadcastEnable", True),
            d.long("brokerId", MASTER_ID),
            d.long("whichBrokerWhenConsumeSlowly", 1),
            d.boolean("notifyConsumerIdsChangedEnable", True),
            d.boolean("consumeMessageOrderly", False),
        )

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SubscriptionGroupConfig:
        return cls.read(JsonObject(d, "subscription group"))

    @classmethod
    def decode(cls, body: bytes | None) -> SubscriptionGroupConfig:
        return cls.read(load(body, "subscription group"))

    def encode(self) -> bytes:
        return encode(self.to_json())


@dataclass(frozen=True, slots=True)
class SubscriptionGroupWrapper:
    table: dict[str, SubscriptionGroupConfig]
    data_version: dict[str, int] = field(default_factory=dict)

    def encode(self) -> bytes:
        groups = {name: config.to_json() for name, config in sorted(self.table.items())}
        return encode({"dataVersion": self.data_version, "subscriptionGroupTable": groups})

    @classmethod
    def decode(cls, body: bytes | None) -> SubscriptionGroupWrapper:
        d = load(body, "subscription group wrapper")
        table = d.child("subscriptionGroupTable")
        groups = {
            k: SubscriptionGroupConfig.read(table.object_value(k, v)) for k, v in table.entries()
        }
        version = d.child("dataVersion")
        return cls(groups, {k: version.long(k) for k, _ in version.entries()})


#: the consume-stats body's map key: the topic-stats body's class, one for both
MessageQueue = _MessageQueue


@dataclass(frozen=True, slots=True)
class OffsetWrapper:
    broker_offset: int
    consumer_offset: int
    last_timestamp: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerOffset": self.broker_offset,
            "consumerOffset": self.consumer_offset,
            "lastTimestamp": self.last_timestamp,
        }

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)


@dataclass(frozen=True, slots=True)
class ConsumeStats:
    offset_table: dict[MessageQueue, OffsetWrapper]
    consume_tps: float = 0.0

    def encode(self) -> bytes:
        table = {mq.key(): w.to_json() for mq, w in sorted(self.offset_table.items())}
        return encode({"consumeTps": float(self.consume_tps), "offsetTable": table})

    @classmethod
    def decode(cls, body: bytes | None) -> ConsumeStats:
        d = load(body, "consume stats")
        table = d.child("offsetTable")
        offsets = {}
        for key, value in table.entries():
            mq = MessageQueue.from_key(table, key)
            w = table.object_value(f"{mq.topic}:{mq.queue_id}", value)
            offsets[mq] = OffsetWrapper(
                w.long("brokerOffset", 0), w.long("consumerOffset", 0), w.long("lastTimestamp", 0)
            )
        tps = dict(d.entries()).get("consumeTps", 0.0)
        if type(tps) not in (int, float):
            raise d.error("consumeTps", "is not a number")
        return cls(offsets, float(tps))

    @property
    def lag(self) -> int:
        return sum(w.lag for w in self.offset_table.values())


@dataclass(frozen=True, slots=True)
class Connection:
    """One client connection: `language` is a `LanguageCode` name, as fastjson writes it."""

    client_id: str
    client_addr: str
    language: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {
            "clientAddr": self.client_addr,
            "clientId": self.client_id,
            "language": self.language,
            "version": self.version,
        }

    @classmethod
    def read(cls, d: JsonObject) -> Connection:
        return cls(
            d.text("clientId"), d.text("clientAddr"), d.text("language"), d.int32("version", 0)
        )


def _connections(d: JsonObject) -> tuple[Connection, ...]:
    return tuple(Connection.read(c) for c in d.objects("connectionSet"))


@dataclass(frozen=True, slots=True)
class ConsumerConnection:
    connections: tuple[Connection, ...]
    subscriptions: dict[str, SubscriptionData]
    consume_type: str | None
    message_model: str | None
    consume_from_where: str | None

    def encode(self) -> bytes:
        body: dict[str, Any] = {"connectionSet": [c.to_json() for c in self.connections]}
        if self.consume_from_where is not None:
            body["consumeFromWhere"] = self.consume_from_where
        if self.consume_type is not None:
            body["consumeType"] = self.consume_type
        if self.message_model is not None:
            body["messageModel"] = self.message_model
        body["subscriptionTable"] = {
            topic: s.to_dict() for topic, s in sorted(self.subscriptions.items())
        }
        return encode(body)

    @classmethod
    def decode(cls, body: bytes | None) -> ConsumerConnection:
        d = load(body, "consumer connection")
        table = d.child("subscriptionTable")
        subscriptions = {
            k: SubscriptionData.read(table.object_value(k, v)) for k, v in table.entries()
        }
        return cls(
            _connections(d),
            subscriptions,
            d.optional_text("consumeType"),
            d.optional_text("messageModel"),
            d.optional_text("consumeFromWhere"),
        )


@dataclass(frozen=True, slots=True)
class ProducerConnection:
    connections: tuple[Connection, ...]

    def encode(self) -> bytes:
        return encode({"connectionSet": [c.to_json() for c in self.connections]})

    @classmethod
    def decode(cls, body: bytes | None) -> ProducerConnection:
        return cls(_connections(load(body, "producer connection")))


@dataclass(frozen=True, slots=True)
class GroupList:
    groups: tuple[str, ...]

    def encode(self) -> bytes:
        return encode({"groupList": sorted(self.groups)})

    @classmethod
    def decode(cls, body: bytes | None) -> GroupList:
        d = load(body, "group list")
        return cls(tuple(d.items("groupList", d.text_value)))


@dataclass(frozen=True, slots=True)
class ResetOffsetBody:
    """Where each queue of a group was reset to (`offsetTable`, MessageQueue -> offset)."""

    offset_table: dict[MessageQueue, int]

    def encode(self) -> bytes:
        return encode({"offsetTable": {mq.key(): o for mq, o in sorted(self.offset_table.items())}})

    def encode_for_c(self) -> bytes:
        """4.9's `ResetOffsetBodyForC`: the C++ client reads a list of `MessageQueueForC`."""
        entries = [
            {"brokerName": mq.broker_name, "offset": o, "queueId": mq.queue_id, "topic": mq.topic}
            for mq, o in sorted(self.offset_table.items())
        ]
        return encode({"offsetTable": entries})

    @classmethod
    def decode(cls, body: bytes | None) -> ResetOffsetBody:
        d = load(body, "reset offset")
        table = d.child("offsetTable")
        entries = table.entries()
        return cls({MessageQueue.from_key(table, k): _long(table, k, v) for k, v in entries})


def _long(d: JsonObject, key: object, value: object) -> int:
    return d.number_value(str(key), value, INT64_MIN, INT64_MAX, parse_long)


@dataclass(frozen=True, slots=True)
class ConsumerOffsetWrapper:
    """`ConsumerOffsetManager`'s table: `topic@group` -> queue id -> committed offset."""

    offset_table: dict[str, dict[int, int]]

    def encode(self) -> bytes:
        table = {k: dict(sorted(q.items())) for k, q in sorted(self.offset_table.items())}
        return encode({"offsetTable": table})

    @classmethod
    def decode(cls, body: bytes | None) -> ConsumerOffsetWrapper:
        d = load(body, "consumer offsets")
        table = d.child("offsetTable")
        result: dict[str, dict[int, int]] = {}
        for key, value in table.entries():
            queues = table.object_value(str(key), value)
            result[str(key)] = {
                queues.int32_value(str(q), q): _long(queues, q, o) for q, o in queues.entries()
            }
        return cls(result)
