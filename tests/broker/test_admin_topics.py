"""Topic admin requests over real sockets against a running broker with traffic: create a topic
with 8 queues and see it in the table, the route and the per-queue stats; delete it; the
name-server role's topic lists, route deletion and write-permission switch; bad input answered
with 4.9's code and remark."""

from __future__ import annotations

import pathlib

import pytest
import trio

from protocol.admin_topic import MessageQueue
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from rmq_client.admin import AdminClient, open_admin
from rmq_client.producer import Message, SendError, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from tests.conftest import RunningBroker, make_config, start_broker

TOPIC = "AdminOrders"


async def ask(admin: AdminClient, code: int, ext: dict[str, str]) -> RemotingCommand:
    return await admin.connection.request(RemotingCommand.request(code, ext))


async def test_a_created_topic_has_its_queues_in_table_route_and_stats(
    broker: RunningBroker,
) -> None:
    async with open_admin("127.0.0.1", broker.port) as admin:
        await admin.create_topic(TOPIC, 8, perm=6)
        table = (await admin.topic_configs()).topic_config_table
        created = table[TOPIC]
        assert (created.read_queue_nums, created.write_queue_nums, created.perm) == (8, 8, 6)
        assert (created.topic_filter_type, created.order) == ("SINGLE_TAG", False)
        route = await admin.connection.get_route(TOPIC)
        assert [(q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
            (8, 8, 6)
        ]
    sent: dict[int, list[int]] = {}
    async with open_producer("127.0.0.1", broker.port) as producer:
        for i in range(11):
            result = await producer.send(Message(TOPIC, b"x", queue_id=i % 8 if i < 8 else 3))
            sent.setdefault(result.queue_id, []).append(result.queue_offset)
    store = broker.server.broker.consume
    assert store is not None
    async with open_admin("127.0.0.1", broker.port) as admin:
        stats = (await admin.topic_stats(TOPIC)).offset_table
    assert sorted(mq.queue_id for mq in stats) == list(range(8))
    for mq, offsets in stats.items():
        assert (mq.topic, mq.broker_name) == (TOPIC, broker.config.broker_name)
        assert (offsets.min_offset, offsets.max_offset) == (0, len(sent[mq.queue_id]))
        stored = store.store_timestamp_at(TOPIC, mq.queue_id, offsets.max_offset - 1)
        assert offsets.last_update_timestamp == stored
        assert stored is not None and stored > 0
    assert stats[MessageQueue(TOPIC, broker.config.broker_name, 3)].max_offset == 4


async def test_an_update_changes_queues_and_the_table_survives_a_restart(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    config = make_config(tmp_path / "store")
    broker = await start_broker(nursery, config)
    async with open_admin("127.0.0.1", broker.port) as admin:
        await admin.create_topic(TOPIC, 8)
        await admin.create_topic(TOPIC, 8, write_queues=2, perm=4, order=True)
        await admin.create_topic("Doomed", 2)
        await admin.delete_topic("Doomed")
        version = (await admin.topic_configs()).data_version.counter
    await broker.stop()
    broker = await start_broker(nursery, config)
    async with open_admin("127.0.0.1", broker.port) as admin:
        after = await admin.topic_configs()
    kept = after.topic_config_table[TOPIC]
    assert (kept.read_queue_nums, kept.write_queue_nums, kept.perm, kept.order) == (8, 2, 4, True)
    assert "Doomed" not in after.topic_config_table
    assert after.data_version.counter == version
    await broker.stop()


async def test_a_deleted_topic_has_no_config_stats_or_route(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    config = make_config(tmp_path / "store", auto_create_topic_enable=False)
    broker = await start_broker(nursery, config)
    async with open_admin("127.0.0.1", broker.port) as admin:
        await admin.create_topic(TOPIC, 4)
        await admin.connection.get_route(TOPIC)
        await admin.delete_topic(TOPIC)
        await admin.delete_topic(TOPIC)  # gone already: SUCCESS as 4.9
        assert TOPIC not in (await admin.topic_configs()).topic_config_table
        with pytest.raises(SendError) as stats:
            await admin.topic_stats(TOPIC)
        assert (stats.value.code, stats.value.remark) == (
            ResponseCode.TOPIC_NOT_EXIST,
            f"topic[{TOPIC}] not exist",
        )
        with pytest.raises(SendError) as route:
            await admin.connection.get_route(TOPIC)
        assert route.value.code == ResponseCode.TOPIC_NOT_EXIST
    await broker.stop()


@pytest.mark.parametrize(
    ("change", "remark"),
    [
        ({"readQueueNums": None}, "the custom field readQueueNums is null"),
        ({"topic": "bad topic"}, "The specified topic contains illegal characters"),
        ({"topic": "x" * 128}, "The specified topic is longer than topic max length."),
        ({"topic": "TBW102"}, "The topic[TBW102] is conflict with system topic."),
        ({"topic": "rmq_sys_mine"}, "The topic[rmq_sys_mine] is conflict with system topic."),
        ({"topic": "DefaultCluster"}, "The topic[DefaultCluster] is conflict with system topic."),
        ({"writeQueueNums": "0"}, "writeQueueNums 0 is out of range: a topic has 1 to 1024"),
        ({"readQueueNums": "1025"}, "readQueueNums 1025 is out of range"),
        ({"readQueueNums": "eight"}, "readQueueNums"),
        ({"perm": "16"}, "perm 16 is not a permission"),
        ({"topicFilterType": "ALL_TAGS"}, "No enum constant"),
    ],
)
async def test_bad_topic_requests_are_refused_and_change_nothing(
    broker: RunningBroker, change: dict[str, str | None], remark: str
) -> None:
    ext: dict[str, str | None] = {
        "topic": TOPIC,
        "defaultTopic": "TBW102",
        "readQueueNums": "8",
        "writeQueueNums": "8",
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
    }
    ext.update(change)
    fields = {k: v for k, v in ext.items() if v is not None}
    async with open_admin("127.0.0.1", broker.port) as admin:
        before = (await admin.topic_configs()).topic_config_table
        response = await ask(admin, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert remark in (response.remark or "")
        assert (await admin.topic_configs()).topic_config_table == before


async def test_system_topics_cannot_be_deleted(broker: RunningBroker) -> None:
    async with open_admin("127.0.0.1", broker.port) as admin:
        response = await ask(admin, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TBW102"})
        assert (response.code, response.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "The topic[TBW102] is conflict with system topic.",
        )
        missing = await ask(admin, RequestCode.DELETE_TOPIC_IN_BROKER, {})
        assert (missing.code, missing.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "the custom field topic is null",
        )
        assert "TBW102" in (await admin.topic_configs()).topic_config_table


async def test_name_server_lists_topics_of_its_cluster(broker: RunningBroker) -> None:
    async with open_admin("127.0.0.1", broker.port) as admin:
        await admin.create_topic(TOPIC, 2)
        everything = await admin.all_topics()
        assert {TOPIC, "TBW102", "DefaultCluster", "broker-a"} <= everything
        assert everything == set((await admin.topic_configs()).topic_config_table)
        assert await admin.topics_by_cluster("DefaultCluster") == everything
        assert await admin.topics_by_cluster("OtherCluster") == frozenset()


async def test_a_route_deleted_in_the_name_server_comes_back_when_the_topic_changes(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_broker(
        nursery, make_config(tmp_path / "store", auto_create_topic_enable=False)
    )
    async with open_admin("127.0.0.1", broker.port) as admin:
        await admin.create_topic(TOPIC, 2)
        await admin.delete_topic_in_namesrv(TOPIC, "OtherCluster")  # not ours: no change
        await admin.connection.get_route(TOPIC)
        await admin.delete_topic_in_namesrv(TOPIC)
        with pytest.raises(SendError) as hidden:
            await admin.connection.get_route(TOPIC)
        assert hidden.value.code == ResponseCode.TOPIC_NOT_EXIST
        assert TOPIC not in await admin.all_topics()
        assert TOPIC in (await admin.topic_configs()).topic_config_table  # the broker keeps it
        await admin.create_topic(TOPIC, 3)  # the broker registers it anew
        route = await admin.connection.get_route(TOPIC)
        assert route.queue_datas[0].write_queue_nums == 3
    await broker.stop()


async def test_wiping_write_permission_makes_every_route_read_only(broker: RunningBroker) -> None:
    async with open_admin("127.0.0.1", broker.port) as admin:
        await admin.create_topic(TOPIC, 2)
        topics = len(await admin.all_topics())
        assert await admin.wipe_write_perm("broker-b") == 0
        assert (await admin.connection.get_route(TOPIC)).queue_datas[0].perm == 6
        assert await admin.wipe_write_perm("broker-a") == topics
        assert (await admin.connection.get_route(TOPIC)).queue_datas[0].perm == 4
        assert (await admin.connection.get_route("AutoCreated")).queue_datas[0].perm == 4
        assert await admin.add_write_perm("broker-a") == topics
        assert (await admin.connection.get_route(TOPIC)).queue_datas[0].perm == 6
        missing = await ask(admin, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {})
        assert (missing.code, missing.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "the custom field brokerName is null",
        )


async def test_stats_of_a_topic_a_group_consumed(broker: RunningBroker) -> None:
    async with open_producer("127.0.0.1", broker.port) as producer:
        for _ in range(5):
            await producer.send(Message(TOPIC, b"y", queue_id=1))
    async with open_pull_consumer("127.0.0.1", broker.port, "admin_group") as consumer:
        await consumer.subscribe(TOPIC)
        pulled = await consumer.pull(TOPIC, 1, 0)
        assert len(pulled.records) == 5
        await consumer.commit(TOPIC, 1, 5)
    async with open_admin("127.0.0.1", broker.port) as admin:
        stats = (await admin.topic_stats(TOPIC)).offset_table
    # auto-created by the first send: 4 queues (the client's default), only queue 1 used
    assert {mq.queue_id: o.max_offset for mq, o in stats.items()} == {0: 0, 1: 5, 2: 0, 3: 0}
    assert all(o.last_update_timestamp == 0 for mq, o in stats.items() if mq.queue_id != 1)


async def test_the_name_server_port_answers_the_name_server_codes(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    config = make_config(tmp_path / "store", namesrv_listen="127.0.0.1:0")
    broker = await start_broker(nursery, config)
    namesrv_port = broker.server.namesrv_addresses[0][1]
    async with open_admin("127.0.0.1", broker.port) as admin:
        await admin.create_topic(TOPIC, 2)
    async with open_admin("127.0.0.1", namesrv_port) as namesrv:
        assert TOPIC in await namesrv.all_topics()
        assert await namesrv.wipe_write_perm("broker-a") > 0
        assert (await namesrv.connection.get_route(TOPIC)).queue_datas[0].perm == 4
        # broker codes are not the name server's
        response = await ask(namesrv, RequestCode.GET_ALL_TOPIC_CONFIG, {})
        assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    await broker.stop()
