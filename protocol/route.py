"""JSON bodies of the name-server and client-lifecycle requests.

`TopicRouteData` (GET_ROUTEINFO_BY_TOPIC), `ClusterInfo` (GET_BROKER_CLUSTER_INFO),
`HeartbeatData` (HEART_BEAT) and `ConsumerListBody` (GET_CONSUMER_LIST_BY_GROUP), with the
field names of RocketMQ's fastjson output. We always write standard JSON (brokerAddrs keys
quoted), which 4.9.4+ clients ask for and older fastjson-based clients also read. A body from a
peer is read field by field (`_json_body`): every field has its Java type and range, group
names and client ids their rules (`names`), or `HeaderFieldError` (SYSTEM_ERROR) names the
field by its path, so that nothing ill-typed reaches the tables the broker keeps from them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

from ._fields import INT64_MAX, INT64_MIN, parse_long
from ._json_body import JsonObject, load_object
from .names import SUBSCRIPTION_TOPIC_MAX_LENGTH, check_client_id, check_group_name, check_label

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
    def read(cls, d: JsonObject) -> QueueData:
        sys_flag = d.int32("topicSysFlag", d.int32("topicSynFlag", 0))  # Syn before 4.9.0
        return cls(
            d.text("brokerName"),
            d.int32("readQueueNums"),
            d.int32("writeQueueNums"),
            d.int32("perm"),
            sys_flag,
        )


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
        return cls.read(JsonObject(d, "broker data"))

    @classmethod
    def read(cls, d: JsonObject) -> BrokerData:
        table = d.child("brokerAddrs")
        addrs = {
            table.number_value(k, k, INT64_MIN, INT64_MAX, parse_long): table.text_value(k, v)
            for k, v in table.entries()
        }
        return cls(d.text("cluster"), d.text("brokerName"), addrs)


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
        d = load_object(body, "topic route")
        table = d.child("filterServerTable")
        servers = {k: table.items(k, table.text_value) for k, _ in table.entries()}
        return cls(
            tuple(QueueData.read(q) for q in d.objects("queueDatas")),
            tuple(BrokerData.read(b) for b in d.objects("brokerDatas")),
            d.optional_text("orderTopicConf"),
            servers,
        )


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
        d = load_object(body, "cluster info")
        broker_table = d.child("brokerAddrTable", required=True)
        brokers = {
            k: BrokerData.read(broker_table.object_value(k, v)) for k, v in broker_table.entries()
        }
        cluster_table = d.child("clusterAddrTable", required=True)
        clusters = {
            k: cluster_table.items(k, cluster_table.text_value) for k, _ in cluster_table.entries()
        }
        return cls(brokers, clusters)


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
    def read(cls, d: JsonObject) -> SubscriptionData:
        return cls(
            d.name("topic", _check_subscription_topic),
            d.text("subString", "*"),
            d.boolean("classFilterMode"),
            tuple(d.items("tagsSet", d.text_value)),
            tuple(d.items("codeSet", d.int32_value)),
            d.long("subVersion", 0),  # the C++ client sends it as a string
            d.text("expressionType", "TAG") or "TAG",
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
    def read(cls, d: JsonObject) -> ConsumerData:
        return cls(
            d.name("groupName", check_group_name),
            d.enum_name("consumeType", _CONSUME_TYPES, 1),
            d.enum_name("messageModel", _MESSAGE_MODELS, 1),
            d.enum_name("consumeFromWhere", _CONSUME_FROM_WHERE, 0),
            tuple(SubscriptionData.read(s) for s in d.objects("subscriptionDataSet")),
            d.boolean("unitMode"),
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
        d = load_object(body, "heartbeat")
        return cls(
            d.name("clientID", check_client_id),
            tuple(ProducerData(p.text("groupName")) for p in d.objects("producerDataSet")),
            tuple(ConsumerData.read(c) for c in d.objects("consumerDataSet")),
        )


@dataclass(frozen=True, slots=True)
class ConsumerListBody:
    consumer_id_list: tuple[str, ...]

    def to_json(self) -> bytes:
        return _dumps({"consumerIdList": list(self.consumer_id_list)})

    @classmethod
    def from_json(cls, body: bytes) -> ConsumerListBody:
        d = load_object(body, "consumer list")
        ids = d.items("consumerIdList", d.text_value)
        return cls(tuple(ids))


def _check_subscription_topic(field: str, topic: str) -> str:
    return check_label(field, topic, "topic", SUBSCRIPTION_TOPIC_MAX_LENGTH)


@dataclass(frozen=True, slots=True)
class CheckClientRequestBody:
    """CHECK_CLIENT_CONFIG's body: the client, its group and the subscription to check."""

    client_id: str
    group: str
    subscription: SubscriptionData | None

    @classmethod
    def from_json(cls, body: bytes) -> CheckClientRequestBody:
        d = load_object(body, "check client config")
        present = dict(d.entries()).get("subscriptionData") is not None
        return cls(
            d.optional_text("clientId") or "",
            d.optional_text("group") or "",
            SubscriptionData.read(d.child("subscriptionData")) if present else None,
        )
