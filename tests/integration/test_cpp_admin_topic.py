"""A topic created through UPDATE_AND_CREATE_TOPIC with 8 queues, then used by the official C++
client's producer (`rocketmq==0.4.4`): the producer learns the 8 queues from the route and
spreads its sends over all of them, as GET_TOPIC_STATS_INFO then shows (a topic the producer
had auto-created would have its default 4)."""

from __future__ import annotations

import pathlib

import trio

from protocol.admin_topic import TopicOffset
from rmq_client.admin import open_admin
from tests.daemon import Daemon
from tests.integration import cpp_producer

TOPIC = "CppEightQueues"
QUEUES = 8
COUNT = 64


async def create(port: int) -> None:
    async with open_admin("127.0.0.1", port) as admin:
        await admin.create_topic(TOPIC, QUEUES)


async def stats(port: int) -> dict[int, TopicOffset]:
    async with open_admin("127.0.0.1", port) as admin:
        table = (await admin.topic_stats(TOPIC)).offset_table
    return {mq.queue_id: offsets for mq, offsets in table.items()}


def test_cpp_producers_use_all_eight_queues(
    tmp_path: pathlib.Path, client_home: pathlib.Path
) -> None:
    daemon = Daemon(tmp_path / "store")
    try:
        trio.run(create, daemon.port)
        cpp_producer.produce(
            daemon.port, TOPIC, "cpp_admin_producer", range(COUNT), lambda i: f"m{i}".encode()
        )
        per_queue = trio.run(stats, daemon.port)
    finally:
        daemon.stop()
    assert sorted(per_queue) == list(range(QUEUES))
    assert all(offsets.max_offset > 0 for offsets in per_queue.values()), per_queue
    assert sum(offsets.max_offset for offsets in per_queue.values()) == COUNT
    assert all(offsets.last_update_timestamp > 0 for offsets in per_queue.values())
