"""Routes agree with the topics the broker has or will create, over loopback: a retry or DLQ
topic before its group created it has the queues it will be created with, and a name no send
could create, or one past the topic limit, has no route."""

from __future__ import annotations

import pathlib

import pytest
import trio

from protocol.codes import ResponseCode
from protocol.route import TopicRouteData
from rmq_client.producer import Message, SendError, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from tests.conftest import make_config, start_broker


def queues_of(route: TopicRouteData) -> tuple[int, int, int]:
    [queue] = route.queue_datas
    return queue.read_queue_nums, queue.write_queue_nums, queue.perm


async def test_a_retry_topic_is_routed_as_its_group_will_create_it(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_broker(nursery, make_config(tmp_path / "store"))
    topics = broker.server.broker.topics
    async with open_producer("127.0.0.1", broker.port) as client:
        before = queues_of(await client.get_route("%RETRY%orderly_group"))
        assert topics.find("%RETRY%orderly_group") is None
        assert before == (1, 1, 6)  # not the 4 queues of an ordinary topic's first send
        assert queues_of(await client.get_route("%DLQ%orderly_group")) == (1, 1, 6)
        assert queues_of(await client.get_route("Ordinary")) == (4, 4, 6)
        async with open_pull_consumer("127.0.0.1", broker.port, "orderly_group") as consumer:
            await consumer.subscribe("Ordinary")  # the heartbeat creates the retry topic
        created = topics.find("%RETRY%orderly_group")
        assert created is not None
        assert (created.read_queue_nums, created.write_queue_nums, created.perm) == before
        assert queues_of(await client.get_route("%RETRY%orderly_group")) == before
    await broker.stop()


@pytest.mark.parametrize("topic", ["bad topic!", "x" * 128, "%RETRY%bad group!"])
async def test_a_name_no_send_could_create_has_no_route(
    nursery: trio.Nursery, tmp_path: pathlib.Path, topic: str
) -> None:
    broker = await start_broker(nursery, make_config(tmp_path / "store"))
    async with open_producer("127.0.0.1", broker.port) as client:
        with pytest.raises(SendError) as info:
            await client.get_route(topic)
    assert info.value.code == ResponseCode.TOPIC_NOT_EXIST
    await broker.stop()


async def test_past_the_topic_limit_only_existing_topics_have_routes(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_broker(nursery, make_config(tmp_path / "store"))
    topics = broker.server.broker.topics
    topics.auto_create_topic_max_num = len(topics.topics()) + 1
    async with open_producer("127.0.0.1", broker.port) as client:
        await client.send(Message("TheLastOne", b"x"))
        assert queues_of(await client.get_route("TheLastOne")) == (4, 4, 6)
        with pytest.raises(SendError) as info:
            await client.get_route("OneTooMany")
        assert info.value.code == ResponseCode.TOPIC_NOT_EXIST
        with pytest.raises(SendError) as sent:
            await client.send(Message("OneTooMany", b"x"))
        assert sent.value.code == ResponseCode.TOPIC_NOT_EXIST  # the send agrees with the route
    await broker.stop()
