"""A topic deleted, then the daemon stopped cleanly or killed at once: after the restart its queue
files, topic-queue table entries and committed offsets stay gone, the replay of the commit log
brings none of its old records back, and created again it starts at queue offset 0. A second
kill after the re-creation keeps the new queue as it was."""

from __future__ import annotations

import pathlib

import pytest
import trio

from rmq_client.admin import open_admin
from rmq_client.producer import Message, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from tests.reliability.conftest import Daemon

TOPIC = "Recreated"
GROUP = "recreated_group"
OLD = 40  # over the small segments: the old records span a rollover
#: a shared test machine's disk may be nearly full; this test is not about a full disk
ROOMY = {"RMQ_DISK_SPACE_WARNING_LEVEL_RATIO": "1.0", "RMQ_DISK_SPACE_CLEAN_FORCIBLY_RATIO": "1.0"}


def topic_dir(store_dir: pathlib.Path) -> pathlib.Path:
    return store_dir / "consumequeue" / TOPIC


async def fill_consume_delete(port: int) -> None:
    async with (
        open_admin("127.0.0.1", port) as admin,
        open_producer("127.0.0.1", port) as producer,
        open_pull_consumer("127.0.0.1", port, GROUP) as consumer,
    ):
        await admin.create_topic(TOPIC, 2)
        for i in range(OLD):
            body = b"old-%d-" % i + b"x" * 3000
            result = await producer.send(Message(TOPIC, body, queue_id=i % 2))
            assert result.queue_offset == i // 2
        await consumer.subscribe(TOPIC)
        pulled = await consumer.pull(TOPIC, 0, 0, max_nums=4)
        assert len(pulled.records) == 4
        await consumer.commit(TOPIC, 0, 4)
        assert await consumer.committed(TOPIC, 0) == 4
        await admin.delete_topic(TOPIC)


async def recreate_and_send(port: int) -> None:
    async with (
        open_admin("127.0.0.1", port) as admin,
        open_producer("127.0.0.1", port) as producer,
        open_pull_consumer("127.0.0.1", port, GROUP) as consumer,
    ):
        assert TOPIC not in (await admin.topic_configs()).topic_config_table
        assert await consumer.committed(TOPIC, 0) == 0  # not the old 4: no offset of the group
        await admin.create_topic(TOPIC, 2)
        assert await consumer.max_offset(TOPIC, 0) == 0
        assert await consumer.max_offset(TOPIC, 1) == 0
        result = await producer.send(Message(TOPIC, b"new-0", queue_id=0))
        assert result.queue_offset == 0
        await consumer.subscribe(TOPIC)
        pulled = await consumer.pull(TOPIC, 0, 0)
        assert [(r.queue_offset, r.body) for r in pulled.records] == [(0, b"new-0")]


async def check_new_queue(port: int) -> None:
    async with (
        open_producer("127.0.0.1", port) as producer,
        open_pull_consumer("127.0.0.1", port, GROUP) as consumer,
    ):
        await consumer.subscribe(TOPIC)
        pulled = await consumer.pull(TOPIC, 0, 0)
        assert [(r.queue_offset, r.body) for r in pulled.records] == [(0, b"new-0")]
        assert await consumer.max_offset(TOPIC, 1) == 0
        result = await producer.send(Message(TOPIC, b"new-1", queue_id=0))
        assert result.queue_offset == 1


@pytest.mark.parametrize("stop", ["clean", "kill"])
def test_a_deleted_topic_stays_deleted_across_a_restart(
    store_dir: pathlib.Path, daemons: list[Daemon], stop: str
) -> None:
    daemon = Daemon(store_dir, env=ROOMY)
    daemons.append(daemon)
    trio.run(fill_consume_delete, daemon.port)
    assert not topic_dir(store_dir).exists()
    if stop == "kill":
        daemon.kill()
    else:
        assert daemon.stop() == 0

    again = Daemon(store_dir, env=ROOMY)
    daemons.append(again)
    assert again.event("commit_log_recovered")["abnormal"] is (stop == "kill")
    assert not topic_dir(store_dir).exists()  # the replay made no queue of the old records
    trio.run(recreate_and_send, again.port)
    again.kill()

    third = Daemon(store_dir, env=ROOMY)
    daemons.append(third)
    trio.run(check_new_queue, third.port)
    assert sorted(p.name for p in topic_dir(store_dir).iterdir()) == ["0"]
    assert third.stop() == 0
