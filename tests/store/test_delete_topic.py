"""`DefaultMessageStore.delete_topic` on a real store: the queue files go, the topic-queue table
forgets the topic, records appended before the delete but not yet dispatched never enter the
new queue, and a restart (clean, or over a mark left by a delete a crash cut short) agrees."""

from __future__ import annotations

import dataclasses
import os
import pathlib

import trio
from structlog.testing import capture_logs

from store.config import FlushDiskType, MessageStoreConfig
from store.decode import decode_record
from store.deleted_topics import DELETED_TOPICS_FILE, DeletedTopics
from store.flush import thread_flusher
from store.mapped_file import MappedFile
from store.message_store import DefaultMessageStore
from tests.store.conftest import make_msg, wait_until

TOPIC = "Gone"


class Gate:
    """A flusher that holds every flush while `closed`: under SYNC_FLUSH nothing past the
    durable offset is dispatched, so records appended meanwhile wait for dispatch."""

    def __init__(self) -> None:
        self.open = trio.Event()
        self.open.set()

    def close(self) -> None:
        self.open = trio.Event()

    async def __call__(self, mapped_file: MappedFile) -> None:
        await self.open.wait()
        await thread_flusher(mapped_file)


def queue_dir(config: MessageStoreConfig, queue_id: int | None = None) -> str:
    path = os.path.join(config.store_path_root_dir, "consumequeue", TOPIC)
    return path if queue_id is None else os.path.join(path, str(queue_id))


def exists(path: str) -> bool:
    return os.path.exists(path)


def bodies(store: DefaultMessageStore, queue_id: int) -> list[bytes | None]:
    consume = store.consume
    assert consume is not None
    result = consume.get_message(TOPIC, queue_id, 0, 32)
    return [decode_record(raw, 0).body for raw in result.messages]


async def test_undispatched_records_of_a_deleted_topic_never_enter_the_new_queue(
    config: MessageStoreConfig,
) -> None:
    config = dataclasses.replace(config, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    gate = Gate()
    async with DefaultMessageStore.open(config, flusher=gate) as store:
        consume = store.consume
        assert consume is not None
        for i in range(2):
            assert (await store.put_message(make_msg(b"old%d" % i, topic=TOPIC))).is_ok
        await wait_until(lambda: consume.max_offset_in_queue(TOPIC, 0) == 2)
        gate.close()
        for i in range(2, 4):
            put = await store.put_message(
                make_msg(b"old%d" % i, topic=TOPIC, wait_store_msg_ok=False)
            )
            assert put.is_ok
        assert consume.max_offset_in_queue(TOPIC, 0) == 2  # two wait for the flush

        assert store.delete_topic(TOPIC) == [0]
        assert not exists(queue_dir(config))
        assert f"{TOPIC}-0" not in store.topic_queue_table
        assert consume.max_offset_in_queue(TOPIC, 0) == 0

        new = await store.put_message(make_msg(b"new", topic=TOPIC, wait_store_msg_ok=False))
        assert new.append_result is not None and new.append_result.logics_offset == 0
        gate.open.set()
        await wait_until(lambda: consume.dispatched_offset == store.max_offset)
        assert consume.max_offset_in_queue(TOPIC, 0) == 1
        assert bodies(store, 0) == [b"new"]

    async with DefaultMessageStore.open(config) as store:
        assert store.topic_queue_table[f"{TOPIC}-0"] == 1
        assert bodies(store, 0) == [b"new"]
        again = await store.put_message(make_msg(b"newer", topic=TOPIC))
        assert again.append_result is not None and again.append_result.logics_offset == 1


async def test_a_delete_cut_short_by_a_crash_is_finished_at_open(
    config: MessageStoreConfig,
) -> None:
    """The mark was written, the queue files were not yet removed: the next open removes them
    and the stale snapshot's entries of the topic are not taken back."""
    async with DefaultMessageStore.open(config) as store:
        for i in range(3):
            assert (await store.put_message(make_msg(b"old%d" % i, topic=TOPIC, queue_id=1))).is_ok
        assert (await store.put_message(make_msg(b"kept", topic="Kept"))).is_ok
        consume = store.consume
        assert consume is not None
        await wait_until(lambda: consume.max_offset_in_queue(TOPIC, 1) == 3)
        end = store.max_offset
    root = config.store_path_root_dir
    assert exists(queue_dir(config, 1))
    DeletedTopics(root).mark(TOPIC, end)  # what delete_topic does first

    async with DefaultMessageStore.open(config) as store:
        assert not exists(queue_dir(config, 1))
        assert f"{TOPIC}-1" not in store.topic_queue_table
        assert store.topic_queue_table["Kept-0"] == 1
        new = await store.put_message(make_msg(b"new", topic=TOPIC, queue_id=1))
        assert new.append_result is not None and new.append_result.logics_offset == 0
        await wait_until(lambda: bodies(store, 1) == [b"new"])


def test_marks_are_kept_until_retention_passes_them(tmp_path: pathlib.Path) -> None:
    root = str(tmp_path)
    marks = DeletedTopics(root)
    marks.mark("A", 500)
    marks.mark("A", 300)  # a later delete never lowers the barrier
    marks.mark("B-x", 900)
    assert DeletedTopics.load(root).barriers == {"A": 500, "B-x": 900}
    assert DeletedTopics.load(root, min_offset=500).barriers == {"B-x": 900}
    loaded = DeletedTopics.load(root)
    assert loaded.skips("A", 499) and not loaded.skips("A", 500) and not loaded.skips("C", 0)
    assert loaded.skips_key("B-x-3", 10) and not loaded.skips_key("B-3", 10)
    # a snapshot taken before B-x's delete forgets its entries, one taken after keeps them
    table = {"A-0": 7, "B-x-3": 4, "C-1": 2}
    assert loaded.filter_table(table, 900) == {"A-0": 7, "C-1": 2}
    assert loaded.filter_table(table, 901) == table
    loaded.mark("C", 1000, min_offset=600)  # A's mark is past retention: dropped on disk
    assert DeletedTopics.load(root).barriers == {"B-x": 900, "C": 1000}


def test_a_damaged_mark_file_reads_as_no_mark(tmp_path: pathlib.Path) -> None:
    path = tmp_path / DELETED_TOPICS_FILE
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\xc1 not msgpack")
    with capture_logs() as logs:
        assert DeletedTopics.load(str(tmp_path)).barriers == {}
    assert [entry["event"] for entry in logs] == ["deleted_topics_unreadable"]
