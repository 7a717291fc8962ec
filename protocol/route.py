"""JSON bodies of the name-server and client-lifecycle requests.

`TopicRouteData` (GET_ROUTEINFO_BY_TOPIC), `ClusterInfo` (GET_BROKER_CLUSTER_INFO),
`HeartbeatData` (HEART_BEAT) and `ConsumerListBody` (GET_CONSUMER_LIST_BY_GROUP), with the
field names of RocketMQ's fastjson output. We always write standard JSON (brokerAddrs keys
quoted), which 4.9.4+ clients ask for and older fastjson-based clients also read. A body from a
peer that does not parse raises `HeaderFieldError` (field "body", SYSTEM_ERROR).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

from .errors import HeaderFieldError

# fastjson reads an enum sent as a number by its ordinal; the C++ client sends numbers.
_CONSUME_TYPES: Final = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
_MESSAGE_MODELS: Final = ("BROADCASTING", "CLUSTERING")
_CONSUME_FROM_WHERE: Final = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _loads(body: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(body.decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise HeaderFieldError("body", f"{what} body is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise HeaderFieldError("body", f"{what} body is not a JSON object")
    return obj


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QueueData:
        sys_flag = d.get("topicSysFlag", d.get("topicSynFlag", 0))  # spelled Syn before 4.9.0
        return cls(d["brokerName"], d["readQueueNums"], d["writeQueueNums"], d["perm"], sys_flag)


@dataclass(frozen=True, slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str]  # brokerId -> "ip:port"; 0 is the master

    def to_dict(self) -> dict[str, Any]:
        return {
            "brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BrokerData:
        addrs = {int(k): v for k, v in d.get("brokerAddrs", {}).items()}
        return cls(d["cluster"], d["brokerName"], addrs)


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        body: dict[str, Any] = {
            "brokerDatas": [b.to_dict() for b in self.broker_datas],
            "filterServerTable": self.filter_server_table,
            "queueDatas": [q.to_dict() for q in self.queue_datas],
        }
        if self.order_topic_conf is not None:
            body["orderTopicConf"] = self.order_topic_conf
        return _dumps(body)

    @classmethod
    def from_json(cls, body: bytes) -> TopicRouteData:
        d = _loads(body, "topic route")
        try:
            return cls(
                tuple(QueueData.from_dict(q) for q in d.get("queueDatas") or ()),
                tuple(BrokerData.from_dict(b) for b in d.get("brokerDatas") or ()),
                d.get("orderTopicConf"),
                d.get("filterServerTable") or {},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise HeaderFieldError("body", f"topic route body is malformed: {exc!r}") from None


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    broker_addr_table: dict[str, BrokerData]
    cluster_addr_table: dict[str, list[str]]  # cluster -> broker names

    def to_json(self) -> bytes:
        return _dumps(
            {
                "brokerAddrTable": {k: v.to_dict() for k, v in self.broker_addr_table.items()},
                "clusterAddrTable": self.cluster_addr_table,
            }
        )

    @classmethod
    def from_json(cls, body: bytes) -> ClusterInfo:
        d = _loads(body, "cluster info")
        try:
            brokers = {k: BrokerData.from_dict(v) for k, v in d["brokerAddrTable"].items()}
            return cls(brokers, {k: list(v) for k, v in d["clusterAddrTable"].items()})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise HeaderFieldError("body", f"cluster info body is malformed: {exc!r}") from None


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    topic: str
    sub_string: str
    class_filter_mode: bool = False
    tags_set: tuple[str, ...] = ()
    code_set: tuple[int, ...] = ()
    sub_version: int = 0
    expression_type: str = "TAG"

    def to_dict(self) -> dict[str, Any]:
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": list(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": list(self.tags_set),
            "topic": self.topic,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SubscriptionData:
        return cls(
            d["topic"],
            d.get("subString", "*"),
            bool(d.get("classFilterMode", False)),
            tuple(d.get("tagsSet") or ()),
            tuple(int(c) for c in d.get("codeSet") or ()),
            int(d.get("subVersion", 0)),  # the C++ client sends it as a string
            d.get("expressionType") or "TAG",
        )


@dataclass(frozen=True, slots=True)
class ProducerData:
    group_name: str


@dataclass(frozen=True, slots=True)
class ConsumerData:
    group_name: str
    consume_type: str
    message_model: str
    consume_from_where: str
    subscription_data_set: tuple[SubscriptionData, ...] = ()
    unit_mode: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "consumeFromWhere": self.consume_from_where,
            "consumeType": self.consume_type,
            "groupName": self.group_name,
            "messageModel": self.message_model,
            "subscriptionDataSet": [s.to_dict() for s in self.subscription_data_set],
            "unitMode": self.unit_mode,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ConsumerData:
        return cls(
            d["groupName"],
            _enum_name(d.get("consumeType", 1), _CONSUME_TYPES),
            _enum_name(d.get("messageModel", 1), _MESSAGE_MODELS),
            _enum_name(d.get("consumeFromWhere", 0), _CONSUME_FROM_WHERE),
            tuple(SubscriptionData.from_dict(s) for s in d.get("subscriptionDataSet") or ()),
            bool(d.get("unitMode", False)),
        )


@dataclass(frozen=True, slots=True)
class HeartbeatData:
    client_id: str
    producer_data_set: tuple[ProducerData, ...] = ()
    consumer_data_set: tuple[ConsumerData, ...] = ()

    def to_json(self) -> bytes:
        return _dumps(
            {
                "clientID": self.client_id,
                "consumerDataSet": [c.to_dict() for c in self.consumer_data_set],
                "producerDataSet": [{"groupName": p.group_name} for p in self.producer_data_set],
            }
        )

    @classmethod
    def from_json(cls, body: bytes) -> HeartbeatData:
        """Parse a heartbeat; a missing consumerDataSet and a trailing newline are fine (C++)."""
        d = _loads(body, "heartbeat")
        try:
            return cls(
                d["clientID"],
                tuple(ProducerData(p["groupName"]) for p in d.get("producerDataSet") or ()),
                tuple(ConsumerData.from_dict(c) for c in d.get("consumerDataSet") or ()),
            )
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise HeaderFieldError("body", f"heartbeat body is malformed: {exc!r}") from None


@dataclass(frozen=True, slots=True)
class ConsumerListBody:
    consumer_id_list: tuple[str, ...]

    def to_json(self) -> bytes:
        return _dumps({"consumerIdList": list(self.consumer_id_list)})

    @classmethod
    def from_json(cls, body: bytes) -> ConsumerListBody:
        d = _loads(body, "consumer list")
        ids = d.get("consumerIdList") or []
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise HeaderFieldError("body", "consumer list body has a bad consumerIdList")
        return cls(tuple(ids))


def _enum_name(value: object, names: tuple[str, ...]) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and 0 <= value < len(names):
        return names[value]
    raise ValueError(f"enum value {value!r} is out of range")
