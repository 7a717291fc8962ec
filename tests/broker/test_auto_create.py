"""Auto-creation held to one set of rules, whichever request triggers it (issue #26, findings 5
and 8), against a real broker on loopback.

A SEND asking for 0 or fewer queues creates no topic (a later valid send still creates a usable
one); a group whose `%RETRY%` topic would be over 127 characters is refused by a send back, a
heartbeat and a pull before anything is created for it, and a delayed message sent after such
a send back is delivered; once the tables hold `auto_create_topic_max_num` topics or
`auto_create_subscription_group_max_num` groups, new ones are refused with a remark naming the
key while existing and configured topics and groups are served as before.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import trio

from broker.topic_config import SCHEDULE_TOPIC
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    PullMessageRequestHeader,
    SendMessageRequestHeaderV2,
)
from protocol.msgid import decode_offset_msg_id
from protocol.route import ConsumerData, HeartbeatData, SubscriptionData
from rmq_client.producer import Message, Producer, SendError, SendStatus, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from tests.conftest import RunningBroker, make_config, start_broker

DEADLINE_S = 10


async def send_asking_queues(producer: Producer, topic: str, queue_nums: int) -> RemotingCommand:
    header = SendMessageRequestHeaderV2("pg", topic, "TBW102", queue_nums, 0, 0, 1, 0)
    command = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_ext_fields(), b"b")
    return await producer.request(command)


async def send_back(producer: Producer, offset: int, group: str) -> RemotingCommand:
    header = ConsumerSendMsgBackRequestHeader(offset, group, 1)
    command = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext_fields())
    return await producer.request(command)


async def pull_as(producer: Producer, group: str, topic: str) -> RemotingCommand:
    header = PullMessageRequestHeader(group, topic, 0, 0, 32, 0, 0, 0, 0, "*", "TAG")
    return await producer.request(
        RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext_fields())
    )


@pytest.mark.parametrize("queue_nums", [0, -3])
async def test_a_send_asking_for_no_queues_creates_no_topic(
    broker: RunningBroker, producer: Producer, queue_nums: int
) -> None:
    refused = await send_asking_queues(producer, "NoQueues", queue_nums)
    assert refused.code == ResponseCode.SYSTEM_ERROR
    assert (
        refused.remark == f"topic[NoQueues] cannot be created with {queue_nums} queues: at least 1"
    )
    assert broker.server.broker.topics.find("NoQueues") is None
    sent = await send_asking_queues(producer, "NoQueues", 4)
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    created = broker.server.broker.topics.find("NoQueues")
    assert created is not None and created.write_queue_nums == created.read_queue_nums == 4


@pytest.mark.parametrize("length", [121, 130])
async def test_a_send_back_of_a_group_whose_retry_topic_cannot_exist_is_refused(
    broker: RunningBroker, producer: Producer, length: int
) -> None:
    group = "g" * length
    sent = await producer.send(Message("Work", b"x"))
    offset = decode_offset_msg_id(sent.offset_msg_id)[2]
    refused = await send_back(producer, offset, group)
    assert refused.code == ResponseCode.SYSTEM_ERROR
    assert f"of {length} characters cannot be created: its topic %RETRY%<group>" in str(
        refused.remark
    )
    context = broker.server.broker
    assert context.groups.find(group) is None
    assert context.topics.find(f"%RETRY%{group}") is None
    assert context.topics.find(f"%DLQ%{group}") is None
    # The delay level a retry would have used still delivers what comes after.
    await producer.send(Message("Later", b"on time", delay_level=1, queue_id=0))
    async with open_pull_consumer("127.0.0.1", broker.port, "later-group") as consumer:
        with trio.fail_after(DEADLINE_S):
            result = await consumer.pull("Later", 0, 0, expression="*", suspend_ms=5000)
    assert [r.body for r in result.records] == [b"on time"]


async def test_a_send_back_of_a_configured_group_whose_retry_topic_cannot_exist_is_refused(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    group = "c" * 130
    store = tmp_path / "store"
    (store / "config").mkdir(parents=True)
    table = {"subscriptionGroupTable": {group: {"groupName": group, "retryQueueNums": 1}}}
    (store / "config" / "subscriptionGroup.json").write_text(json.dumps(table))
    broker = await start_broker(nursery, make_config(store))
    assert broker.server.broker.groups.find(group) is not None
    async with open_producer("127.0.0.1", broker.port) as producer:
        sent = await producer.send(Message("Work", b"x"))
        refused = await send_back(producer, decode_offset_msg_id(sent.offset_msg_id)[2], group)
    assert refused.code == ResponseCode.SYSTEM_ERROR
    assert "%RETRY%<group> breaks the topic rule" in str(refused.remark)
    consume = broker.server.broker.consume
    assert consume is not None
    assert all(consume.max_offset_in_queue(SCHEDULE_TOPIC, q) == 0 for q in range(18))
    await broker.stop()


async def test_the_longest_group_with_a_valid_retry_topic_is_created(
    broker: RunningBroker, producer: Producer
) -> None:
    group = "g" * 120  # %RETRY% + 120 = 127 characters
    sent = await producer.send(Message("Work", b"x"))
    answer = await send_back(producer, decode_offset_msg_id(sent.offset_msg_id)[2], group)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert broker.server.broker.groups.find(group) is not None


async def test_heartbeats_and_pulls_create_no_group_whose_retry_topic_cannot_exist(
    broker: RunningBroker, producer: Producer
) -> None:
    group = "h" * 121
    async with open_pull_consumer("127.0.0.1", broker.port, group) as consumer:
        with pytest.raises(SendError) as refused:
            await consumer.subscribe("Work")
    assert refused.value.code == ResponseCode.SYSTEM_ERROR
    assert "%RETRY%<group> breaks the topic rule" in str(refused.value.remark)
    pulled = await pull_as(producer, group, "Work")
    assert pulled.code == ResponseCode.SYSTEM_ERROR and "%RETRY%<group>" in str(pulled.remark)
    assert broker.server.broker.groups.find(group) is None
    assert broker.server.broker.topics.find(f"%RETRY%{group}") is None


@pytest.mark.parametrize("group", ["1.5", "-0.0", "\u200b"])
async def test_a_send_back_of_a_group_no_client_could_name_creates_no_topic(
    broker: RunningBroker, producer: Producer, group: str
) -> None:
    sent = await producer.send(Message("Work", b"x"))
    fields = {"offset": str(decode_offset_msg_id(sent.offset_msg_id)[2]), "group": group}
    fields["delayLevel"] = "-1"  # straight to the dead-letter topic
    request = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, fields)
    answer = await producer.request(request)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert not [t for t in broker.server.broker.topics.topics() if t.startswith("%DLQ%")]


async def test_a_heartbeat_refused_part_way_keeps_and_persists_the_groups_before(
    broker: RunningBroker, producer: Producer
) -> None:
    subscription = (SubscriptionData("Work", "*"),)
    consumers = tuple(
        ConsumerData(g, "CONSUME_ACTIVELY", "CLUSTERING", "CONSUME_FROM_FIRST_OFFSET", subscription)
        for g in ("fresh", "f" * 121)
    )
    body = HeartbeatData("10.0.0.9@x", (), consumers).to_json()
    answer = await producer.request(RemotingCommand.request(RequestCode.HEART_BEAT, {}, body))
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert broker.server.broker.groups.find("fresh") is not None
    saved = trio.Path(broker.config.store.store_path_root_dir, "config", "subscriptionGroup.json")
    assert "fresh" in json.loads(await saved.read_text())["subscriptionGroupTable"]


async def test_auto_creation_stops_at_its_limits_and_what_exists_is_served(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    store = tmp_path / "store"
    (store / "config").mkdir(parents=True)
    configured = {"topicName": "Configured", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
    (store / "config" / "topics.json").write_text(
        json.dumps({"topicConfigTable": {"Configured": configured}})
    )
    config = make_config(
        store, auto_create_topic_max_num=14, auto_create_subscription_group_max_num=2
    )
    broker = await start_broker(nursery, config)
    topics, groups = broker.server.broker.topics, broker.server.broker.groups
    assert len(topics.topics()) == 10  # 9 built in, 1 configured: room for 4 more
    async with open_producer("127.0.0.1", broker.port) as producer:
        for group in ("g1", "g2"):  # heartbeats create groups, and their retry topics
            async with open_pull_consumer("127.0.0.1", broker.port, group) as consumer:
                await consumer.subscribe("Configured")
        async with open_pull_consumer("127.0.0.1", broker.port, "g3") as consumer:
            with pytest.raises(SendError) as refused:
                await consumer.subscribe("Configured")
        assert refused.value.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert "auto_create_subscription_group_max_num" in str(refused.value.remark)
        pulled = await pull_as(producer, "g3", "Configured")
        assert pulled.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert groups.find("g3") is None and topics.find("%RETRY%g3") is None

        for topic in ("New1", "New2"):
            assert (await producer.send(Message(topic, b"x"))).status is SendStatus.SEND_OK
        with pytest.raises(SendError) as refused:
            await producer.send(Message("New3", b"x"))
        assert refused.value.code == ResponseCode.TOPIC_NOT_EXIST
        assert "auto_create_topic_max_num" in str(refused.value.remark)
        assert topics.find("New3") is None
        for topic in ("Configured", "New1"):
            assert (await producer.send(Message(topic, b"y", queue_id=0))).status is (
                SendStatus.SEND_OK
            )
        async with open_pull_consumer("127.0.0.1", broker.port, "g1") as consumer:
            await consumer.subscribe("Configured")  # an existing group is served on
            result = await consumer.pull("Configured", 0, 0, expression="*")
        assert [r.body for r in result.records] == [b"y"]
    await broker.stop()
