"""DELETE_TOPIC_IN_BROKER over real sockets against an in-process broker: the topic's queue files,
its topic-queue table entries and its committed offsets go; created again, it starts at queue
offset 0 and a pull returns only the new messages; pulls and sends racing the delete get clean
answers and never bring a queue file of the old topic back."""

from __future__ import annotations

import os
import pathlib

import pytest
import trio
import trio.lowlevel

from protocol.codes import ResponseCode
from rmq_client.admin import open_admin
from rmq_client.producer import Message, SendError, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from store.message_store import DefaultMessageStore
from tests.conftest import make_config, start_broker

TOPIC = "Dropped"
GROUP = "dropped_group"


def listing(path: pathlib.Path) -> list[str]:
    return sorted(os.listdir(path)) if path.is_dir() else []


def store_of(store: object) -> DefaultMessageStore:
    assert isinstance(store, DefaultMessageStore)
    return store


async def test_a_deleted_topic_loses_queues_and_offsets_and_starts_again_at_zero(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    config = make_config(tmp_path / "store", auto_create_topic_enable=False)
    broker = await start_broker(nursery, config)
    queues_dir = tmp_path / "store" / "consumequeue" / TOPIC
    async with (
        open_admin("127.0.0.1", broker.port) as admin,
        open_producer("127.0.0.1", broker.port) as producer,
        open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer,
    ):
        await admin.create_topic(TOPIC, 2)
        for i in range(5):
            await producer.send(Message(TOPIC, b"old-%d" % i, queue_id=i % 2))
        await consumer.subscribe(TOPIC)
        pulled = await consumer.pull(TOPIC, 0, 0)
        assert [r.body for r in pulled.records] == [b"old-0", b"old-2", b"old-4"]
        await consumer.commit(TOPIC, 0, 3)
        assert await consumer.committed(TOPIC, 0) == 3
        assert listing(queues_dir) == ["0", "1"]

        await admin.delete_topic(TOPIC)
        assert listing(queues_dir) == []
        assert not queues_dir.exists()
        table = store_of(broker.server.broker.store).topic_queue_table
        assert not [key for key in table if key.startswith(f"{TOPIC}-")]
        assert f"{TOPIC}@{GROUP}" not in broker.server.broker.offsets.table()
        # no offset of the group, a queue starting at 0: 4.9 answers 0, not the old 3
        assert await consumer.committed(TOPIC, 0) == 0

        await admin.create_topic(TOPIC, 2)
        assert await consumer.max_offset(TOPIC, 0) == 0
        sent = await producer.send(Message(TOPIC, b"new-0", queue_id=0))
        assert sent.queue_offset == 0
        await consumer.subscribe(TOPIC)
        again = await consumer.pull(TOPIC, 0, 0)
        assert [(r.queue_offset, r.body) for r in again.records] == [(0, b"new-0")]
        assert await consumer.max_offset(TOPIC, 0) == 1
        assert await consumer.max_offset(TOPIC, 1) == 0
    await broker.stop()


async def test_pulls_and_sends_racing_the_delete_get_clean_answers(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    config = make_config(tmp_path / "store")
    broker = await start_broker(nursery, config)
    answers: set[int] = set()
    deleted = trio.Event()
    async with (
        open_admin("127.0.0.1", broker.port) as admin,
        open_producer("127.0.0.1", broker.port) as producer,
        open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer,
    ):
        await admin.create_topic(TOPIC, 1)
        for i in range(50):
            await producer.send(Message(TOPIC, b"old-%d" % i, queue_id=0))
        await consumer.subscribe(TOPIC)

        async def pull_until_deleted() -> None:
            offset = 0
            rounds = 0
            while not deleted.is_set() or rounds < 20:
                rounds += 1 if deleted.is_set() else 0
                try:
                    result = await consumer.pull(TOPIC, 0, offset, max_nums=4)
                except SendError as exc:
                    answers.add(exc.code)  # the topic gone from the table
                    await trio.lowlevel.checkpoint()
                    continue
                answers.add(result.code)
                offset = result.next_begin_offset if result.found else 0

        async with trio.open_nursery() as racers:
            racers.start_soon(pull_until_deleted)
            await trio.sleep(0.05)
            await admin.delete_topic(TOPIC)
            deleted.set()
        assert ResponseCode.SUCCESS in answers
        assert answers <= {
            ResponseCode.SUCCESS,
            ResponseCode.PULL_NOT_FOUND,
            ResponseCode.PULL_OFFSET_MOVED,
            ResponseCode.PULL_RETRY_IMMEDIATELY,
            ResponseCode.TOPIC_NOT_EXIST,
            ResponseCode.SUBSCRIPTION_NOT_EXIST,
        }, answers
        queues_dir = tmp_path / "store" / "consumequeue" / TOPIC
        assert not queues_dir.exists()  # no pull or dispatch made a file of it again

        # auto-created by a send (auto_create_topic_enable), it starts at 0 again
        sent = await producer.send(Message(TOPIC, b"new", queue_id=0))
        assert sent.queue_offset == 0
    await broker.stop()


async def test_a_delete_the_store_cannot_make_durable_is_refused_and_can_be_retried(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    config = make_config(tmp_path / "store", auto_create_topic_enable=False)
    broker = await start_broker(nursery, config)
    queues_dir = tmp_path / "store" / "consumequeue" / TOPIC
    blocker = tmp_path / "store" / "config" / "deletedTopics.msgpack.tmp"
    async with (
        open_admin("127.0.0.1", broker.port) as admin,
        open_producer("127.0.0.1", broker.port) as producer,
        open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer,
    ):
        await admin.create_topic(TOPIC, 1)
        await producer.send(Message(TOPIC, b"old", queue_id=0))
        await consumer.subscribe(TOPIC)
        assert len((await consumer.pull(TOPIC, 0, 0)).records) == 1
        blocker.mkdir()  # the mark's temp file cannot be written
        with pytest.raises(SendError) as refused:
            await admin.delete_topic(TOPIC)
        assert refused.value.code == ResponseCode.SYSTEM_ERROR
        assert f"deleting the queues of {TOPIC} failed" in (refused.value.remark or "")
        assert listing(queues_dir) == ["0"]  # nothing of the store's part was done
        assert TOPIC not in (await admin.topic_configs()).topic_config_table

        blocker.rmdir()
        await admin.delete_topic(TOPIC)
        assert not queues_dir.exists()
    await broker.stop()
