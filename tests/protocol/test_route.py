"""Name-server and heartbeat JSON bodies."""

from __future__ import annotations

import json

import pytest

from protocol.errors import HeaderFieldError
from protocol.route import (
    BrokerData,
    ClusterInfo,
    ConsumerData,
    ConsumerListBody,
    HeartbeatData,
    ProducerData,
    QueueData,
    SubscriptionData,
    TopicRouteData,
)

SPEC_ROUTE = (
    b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"broker-a",'
    b'"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a",'
    b'"perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
)
ROUTE = TopicRouteData(
    queue_datas=(QueueData("broker-a", 4, 4, 6),),
    broker_datas=(BrokerData("DefaultCluster", "broker-a", {0: "127.0.0.1:10911"}),),
)


def test_route_matches_the_spec_example_byte_for_byte() -> None:
    assert ROUTE.to_json() == SPEC_ROUTE
    assert TopicRouteData.from_json(SPEC_ROUTE) == ROUTE


def test_route_order_conf_and_old_sys_flag_spelling() -> None:
    route = TopicRouteData(ROUTE.queue_datas, ROUTE.broker_datas, order_topic_conf="broker-a:4")
    assert json.loads(route.to_json())["orderTopicConf"] == "broker-a:4"
    assert TopicRouteData.from_json(route.to_json()) == route
    old = SPEC_ROUTE.replace(b'"topicSysFlag":0', b'"topicSynFlag":3')
    assert TopicRouteData.from_json(old).queue_datas[0].topic_sys_flag == 3


def test_broker_addrs_keys_are_quoted_and_sorted() -> None:
    data = BrokerData("c", "b", {1: "10.0.0.2:10911", 0: "10.0.0.1:10911"})
    assert data.to_dict()["brokerAddrs"] == {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}
    assert BrokerData.from_dict(data.to_dict()) == data


@pytest.mark.parametrize("body", [b"", b"[]", b"{", b"\xff"])
def test_route_body_that_is_not_a_json_object(body: bytes) -> None:
    with pytest.raises(HeaderFieldError) as info:
        TopicRouteData.from_json(body)
    assert info.value.field == "body"


def test_a_missing_route_field_is_named_by_its_path() -> None:
    with pytest.raises(HeaderFieldError) as info:
        TopicRouteData.from_json(b'{"queueDatas":[{"perm":6}]}')
    assert info.value.field == "queueDatas[0].brokerName"
    assert str(info.value) == "topic route body queueDatas[0].brokerName is missing"


def test_cluster_info_round_trip() -> None:
    info = ClusterInfo(
        {"broker-a": BrokerData("DefaultCluster", "broker-a", {0: "127.0.0.1:10911"})},
        {"DefaultCluster": ["broker-a"]},
    )
    body = json.loads(info.to_json())
    assert body["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
    assert body["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": "127.0.0.1:10911"}
    assert ClusterInfo.from_json(info.to_json()) == info


def test_java_heartbeat_with_enum_names() -> None:
    body = json.dumps(
        {
            "clientID": "10.0.0.5@123",
            "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}, {"groupName": "pg"}],
            "consumerDataSet": [
                {
                    "groupName": "cg",
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "BROADCASTING",
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "unitMode": False,
                    "subscriptionDataSet": [
                        {
                            "classFilterMode": False,
                            "topic": "T",
                            "subString": "a || b",
                            "tagsSet": ["a", "b"],
                            "codeSet": [97, 98],
                            "subVersion": 1700000000000,
                            "expressionType": "TAG",
                        }
                    ],
                }
            ],
        }
    ).encode()
    heartbeat = HeartbeatData.from_json(body)
    assert heartbeat == HeartbeatData(
        "10.0.0.5@123",
        (ProducerData("CLIENT_INNER_PRODUCER"), ProducerData("pg")),
        (
            ConsumerData(
                "cg",
                "CONSUME_PASSIVELY",
                "BROADCASTING",
                "CONSUME_FROM_FIRST_OFFSET",
                (SubscriptionData("T", "a || b", False, ("a", "b"), (97, 98), 1700000000000),),
            ),
        ),
    )
    assert HeartbeatData.from_json(heartbeat.to_json()) == heartbeat


@pytest.mark.parametrize(
    "body",
    [b"{}", b'{"clientID":"x","consumerDataSet":[{"groupName":"g","consumeType":7}]}', b"1"],
)
def test_bad_heartbeat(body: bytes) -> None:
    with pytest.raises(HeaderFieldError, match="heartbeat body"):
        HeartbeatData.from_json(body)


def test_consumer_list_body() -> None:
    body = ConsumerListBody(("a@1", "b@2"))
    assert body.to_json() == b'{"consumerIdList":["a@1","b@2"]}'
    assert ConsumerListBody.from_json(body.to_json()) == body
    with pytest.raises(HeaderFieldError):
        ConsumerListBody.from_json(b'{"consumerIdList":[1]}')
