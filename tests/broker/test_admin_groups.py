"""Consumer-group admin requests over a real socket against a broker with traffic: group
settings created, listed, persisted and deleted; consume stats whose lag falls to 0 as a group
consumes; the offset table; who consumes a topic; and the refusals of bad input."""

from __future__ import annotations

import json
import pathlib

import pytest
import trio

from protocol.admin_group import ConsumeStats, SubscriptionGroupConfig
from protocol.codes import RequestCode, ResponseCode
from rmq_client.admin_groups import (
    call,
    delete_subscription_group,
    get_all_consumer_offsets,
    get_all_subscription_groups,
    get_consume_stats,
    query_topic_consume_by_who,
    update_subscription_group,
)
from rmq_client.producer import Message, Producer, SendError, open_producer
from rmq_client.pull_consumer import PullConsumer, open_pull_consumer
from tests.broker.admin_acl import ADMIN, PLAIN, start_acl_broker
from tests.conftest import RunningBroker, make_config, start_broker
from tests.store.conftest import wait_until

TOPIC = "AdminStats"
GROUP = "stats_group"
QUEUES = 4
PER_QUEUE = (5, 3, 0, 7)  # messages sent to queues 0..3


async def send_traffic(producer: Producer, topic: str = TOPIC) -> None:
    for queue_id, count in enumerate(PER_QUEUE):
        for index in range(count):
            await producer.send(Message(topic, f"q{queue_id}-{index}".encode(), queue_id=queue_id))


async def stats(producer: Producer, topic: str | None = TOPIC) -> ConsumeStats:
    return await get_consume_stats(producer, GROUP, topic)


def by_queue(result: ConsumeStats) -> dict[int, tuple[int, int]]:
    """queue id -> (broker offset, consumer offset)."""
    return {
        mq.queue_id: (w.broker_offset, w.consumer_offset) for mq, w in result.offset_table.items()
    }


async def consume_queue(consumer: PullConsumer, queue_id: int) -> int:
    """Pull queue `queue_id` to its end and commit; how many messages were read."""
    result = await consumer.pull(TOPIC, queue_id, 0, max_nums=32)
    read = len(result.records)
    await consumer.commit(TOPIC, queue_id, result.next_begin_offset)
    return read


async def test_consume_stats_lag_falls_to_zero_as_the_group_consumes(
    broker: RunningBroker, producer: Producer
) -> None:
    await send_traffic(producer)
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe(TOPIC)
        for queue_id in range(QUEUES):
            await consumer.commit(TOPIC, queue_id, 0)
        await wait_for_ends(producer)
        before = await stats(producer)
        assert by_queue(before) == {q: (n, 0) for q, n in enumerate(PER_QUEUE)}
        assert before.lag == sum(PER_QUEUE)
        assert {mq.broker_name for mq in before.offset_table} == {broker.config.broker_name}
        assert all(w.last_timestamp == 0 for w in before.offset_table.values())

        lags = [before.lag]
        for queue_id in range(QUEUES):
            assert await consume_queue(consumer, queue_id) == PER_QUEUE[queue_id]
            after = await stats(producer)
            lags.append(after.lag)
            assert by_queue(after)[queue_id] == (PER_QUEUE[queue_id], PER_QUEUE[queue_id])
        assert lags == [15, 10, 7, 7, 0]
        final = await stats(producer)
        assert final.consume_tps > 0  # 15 messages committed within the last minute
        stamps = {mq.queue_id: w.last_timestamp for mq, w in final.offset_table.items()}
        assert stamps[2] == 0 and all(stamps[q] > 0 for q in (0, 1, 3))
        # No topic: every topic the group committed in
        assert by_queue(await stats(producer, None)) == by_queue(final)


async def test_offset_table_and_who_consumes(broker: RunningBroker, producer: Producer) -> None:
    await send_traffic(producer)
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe(TOPIC)
        await consumer.commit(TOPIC, 0, 2)
        await consumer.commit(TOPIC, 3, 6)
        offsets = await get_all_consumer_offsets(producer)
        assert offsets.offset_table[f"{TOPIC}@{GROUP}"] == {0: 2, 3: 6}
        assert await query_topic_consume_by_who(producer, TOPIC) == [GROUP]
    # Offline now: the committed offsets still name the group
    await wait_until(lambda: broker.server.broker.consumers.group_info(GROUP) is None)
    assert await query_topic_consume_by_who(producer, TOPIC) == [GROUP]
    assert await query_topic_consume_by_who(producer, "NobodyReads") == []


async def test_group_settings_are_stored_listed_persisted_and_deleted(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    config = make_config(tmp_path / "store")
    broker = await start_broker(nursery, config)
    settings = SubscriptionGroupConfig(
        "orders_group", consume_enable=False, retry_queue_nums=2, retry_max_times=3
    )
    async with open_producer("127.0.0.1", broker.port) as admin:
        before = await get_all_subscription_groups(admin)
        await update_subscription_group(admin, settings)
        listed = await get_all_subscription_groups(admin)
        assert listed.table["orders_group"] == settings
        assert listed.data_version["counter"] > before.data_version.get("counter", 0)
        await send_traffic(admin)
        async with open_pull_consumer("127.0.0.1", broker.port, "orders_group") as consumer:
            await consumer.commit(TOPIC, 0, 1)
            with pytest.raises(SendError) as refused:  # consumeEnable false: no pulls
                await consumer.pull(TOPIC, 0, 0)
            assert refused.value.code == ResponseCode.NO_PERMISSION
    await broker.stop()
    stored = json.loads((tmp_path / "store/config/subscriptionGroup.json").read_text())
    entry = stored["subscriptionGroupTable"]["orders_group"]
    assert (entry["consumeEnable"], entry["retryQueueNums"], entry["retryMaxTimes"]) == (
        False,
        2,
        3,
    )

    broker = await start_broker(nursery, config)
    async with open_producer("127.0.0.1", broker.port) as admin:
        assert (await get_all_subscription_groups(admin)).table["orders_group"] == settings
        await delete_subscription_group(admin, "orders_group")  # offsets kept
        assert "orders_group" not in (await get_all_subscription_groups(admin)).table
        assert f"{TOPIC}@orders_group" in (await get_all_consumer_offsets(admin)).offset_table
        await delete_subscription_group(admin, "orders_group", remove_offset=True)
        assert f"{TOPIC}@orders_group" not in (await get_all_consumer_offsets(admin)).offset_table
    await broker.stop()


@pytest.mark.parametrize(
    ("body", "remark"),
    [
        (b"{}", "groupName is missing"),
        (b"not json", "not JSON at character 0"),
        (b'{"groupName":"bad group!"}', "illegal characters"),
        (b'{"groupName":"g","retryQueueNums":-1}', "retryQueueNums -1 is out of range"),
        (b'{"groupName":"g","retryMaxTimes":100000}', "retryMaxTimes 100000 is out of range"),
        (b'{"groupName":"g","consumeEnable":"yes"}', "consumeEnable is a string"),
        (b'{"groupName":"g","retryQueueNums":99999999999}', "out of range"),
    ],
)
async def test_bad_group_settings_are_refused(
    broker: RunningBroker, producer: Producer, body: bytes, remark: str
) -> None:
    with pytest.raises(SendError) as refused:
        await call(producer, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
    assert refused.value.code == ResponseCode.SYSTEM_ERROR
    assert remark in (refused.value.remark or "")
    assert "g" not in broker.server.broker.groups.table()


@pytest.mark.parametrize(
    ("code", "fields", "remark"),
    [
        (RequestCode.DELETE_SUBSCRIPTIONGROUP, {}, "the custom field groupName is null"),
        (RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "a b"}, "illegal characters"),
        (RequestCode.GET_CONSUME_STATS, {}, "the custom field consumerGroup is null"),
        (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {}, "the custom field topic is null"),
        (RequestCode.GET_CONSUME_STATS, {"consumerGroup": "x" * 300}, "longer than group max"),
    ],
)
async def test_bad_headers_are_refused_with_a_remark(
    producer: Producer, code: int, fields: dict[str, str], remark: str
) -> None:
    with pytest.raises(SendError) as refused:
        await call(producer, code, fields)
    assert refused.value.code == ResponseCode.SYSTEM_ERROR
    assert remark in (refused.value.remark or "")


async def test_stats_of_an_unknown_group_or_topic(producer: Producer) -> None:
    """A group that never committed reads as offset 0 on every queue (as 4.9 answers); an
    unknown topic, or no topic and no commits, is an empty table."""
    await send_traffic(producer)
    await wait_for_ends(producer, "never_seen")
    unknown = await get_consume_stats(producer, "never_seen", TOPIC)
    assert by_queue(unknown) == {q: (n, 0) for q, n in enumerate(PER_QUEUE)}
    assert (await get_consume_stats(producer, "never_seen", "NoSuchTopic")).offset_table == {}
    assert (await get_consume_stats(producer, "never_seen")).offset_table == {}


async def wait_for_ends(producer: Producer, group: str = GROUP) -> None:
    """Until the consume queues hold every message sent (the dispatch is asynchronous)."""
    with trio.fail_after(5):
        while True:
            result = await get_consume_stats(producer, group, TOPIC)
            if [b for b, _ in sorted(by_queue(result).values())] == sorted(PER_QUEUE):
                return
            await trio.sleep(0.02)


async def test_with_acl_only_an_admin_changes_groups(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    """200, 207 and 222 need an admin account; the read-only 208 takes any signed account,
    as 4.9's plain ACL does; an unsigned request is refused."""
    broker = await start_acl_broker(nursery, tmp_path)
    settings = SubscriptionGroupConfig("acl_group", retry_max_times=2)
    reset = {"topic": TOPIC, "group": "acl_group", "timestamp": "0", "isForce": "true"}
    async with open_producer("127.0.0.1", broker.port, credentials=PLAIN) as user:
        for attempt in (
            update_subscription_group(user, settings),
            delete_subscription_group(user, "acl_group"),
            call(user, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, reset),
        ):
            with pytest.raises(SendError) as refused:
                await attempt
            assert refused.value.code == ResponseCode.NO_PERMISSION
            assert "Need admin permission" in (refused.value.remark or "")
        assert (await get_consume_stats(user, "acl_group", TOPIC)).offset_table == {}
    assert broker.server.broker.groups.find("acl_group") is None
    async with open_producer("127.0.0.1", broker.port) as unsigned:
        with pytest.raises(SendError) as anonymous:
            await get_consume_stats(unsigned, "acl_group")
        assert anonymous.value.code == ResponseCode.NO_PERMISSION
    async with open_producer("127.0.0.1", broker.port, credentials=ADMIN) as admin:
        await update_subscription_group(admin, settings)
        assert (await get_all_subscription_groups(admin)).table["acl_group"] == settings
        await delete_subscription_group(admin, "acl_group")
    assert broker.server.broker.groups.find("acl_group") is None
    await broker.stop()
