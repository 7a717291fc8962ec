"""The store's consume side: dispatch up to the durable offset, reads by logical offset, tag
filtering, out-of-range statuses, and the rebuild of the queues after a crash."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import shutil
import threading

import pytest
import trio
import trio.lowlevel
from structlog.testing import capture_logs

from store.config import FlushDiskType, MessageStoreConfig
from store.consume_queue import CqUnit
from store.decode import decode_record
from store.dispatch import ConsumeQueueTable
from store.get_message import GetMessageStatus, TagFilter
from store.mapped_file import MappedFile
from store.message import TRANSACTION_PREPARED_TYPE, enters_consume_queue, java_string_hash
from store.message_store import DefaultMessageStore
from store.reader import CommitLogReader
from store.status import PutMessageStatus

from .conftest import make_msg, patch_file, touch, wait_until


def sync(config: MessageStoreConfig) -> MessageStoreConfig:
    return dataclasses.replace(config, flush_disk_type=FlushDiskType.SYNC_FLUSH)


def tags_props(tag: str) -> str:
    return f"TAGS\x01{tag}\x02CLUSTER\x01DefaultCluster"


async def test_sent_messages_are_read_back_in_order_across_segments(
    config: MessageStoreConfig,
) -> None:
    async with DefaultMessageStore.open(sync(config)) as store:
        for i in range(60):  # 4 KiB segments: several rollovers
            result = await store.put_message(make_msg(body=b"m%03d" % i, queue_id=i % 2))
            assert result.status is PutMessageStatus.PUT_OK
        consume = store.consume
        assert consume is not None
        await wait_until(lambda: consume.max_offset_in_queue("T1", 1) == 30)
        got = consume.get_message("T1", 0, 0, 100)
        assert got.status is GetMessageStatus.FOUND
        bodies = [decode_record(m, 0).body for m in got.messages]
        assert bodies == [b"m%03d" % i for i in range(0, 60, 2)]
        assert got.next_begin_offset == 30 and (got.min_offset, got.max_offset) == (0, 30)
        part = consume.get_message("T1", 1, 28, 5)
        assert [decode_record(m, 0).queue_offset for m in part.messages] == [28, 29]


async def test_tag_filter_and_offset_statuses(config: MessageStoreConfig) -> None:
    async with DefaultMessageStore.open(sync(config)) as store:
        for i in range(10):
            await store.put_message(make_msg(body=b"%d" % i, properties=tags_props("AB"[i % 2])))
        consume = store.consume
        assert consume is not None
        await wait_until(lambda: consume.max_offset_in_queue("T1", 0) == 10)
        only_b = consume.get_message("T1", 0, 0, 32, tag_filter=TagFilter.parse("B"))
        assert [decode_record(m, 0).body for m in only_b.messages] == [b"1", b"3", b"5", b"7", b"9"]
        none = consume.get_message("T1", 0, 0, 32, tag_filter=TagFilter.parse("C || D"))
        assert none.status is GetMessageStatus.NO_MATCHED_MESSAGE and none.next_begin_offset == 10
        assert consume.get_message("T1", 0, 10, 1).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        bad = consume.get_message("T1", 0, 99, 1)
        assert bad.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and bad.next_begin_offset == 0
        missing = consume.get_message("T1", 7, 0, 1)
        assert missing.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE


async def test_prepared_records_are_not_dispatched(config: MessageStoreConfig) -> None:
    async with DefaultMessageStore.open(sync(config)) as store:
        await store.put_message(make_msg(body=b"half", sys_flag=TRANSACTION_PREPARED_TYPE))
        await store.put_message(make_msg(body=b"plain"))
        consume = store.consume
        assert consume is not None
        await wait_until(lambda: consume.max_offset_in_queue("T1", 0) >= 1)
        got = consume.get_message("T1", 0, 0, 10)
        assert [decode_record(m, 0).body for m in got.messages] == [b"plain"]


async def test_listener_hears_each_new_message(config: MessageStoreConfig) -> None:
    heard: list[tuple[str, int, int]] = []
    async with DefaultMessageStore.open(sync(config)) as store:
        assert store.consume is not None
        store.consume.add_listener(lambda t, q, m: heard.append((t, q, m)))
        await store.put_message(make_msg(queue_id=3))
        await wait_until(lambda: bool(heard))
    assert heard == [("T1", 3, 1)]


def queue_units(root: str) -> dict[tuple[str, int], list[tuple[int, int]]]:
    table = ConsumeQueueTable(root)
    try:
        return {
            key: [(u.physical_offset, u.size) for u in cq.read_units(0, 10_000)]
            for key, cq in table.queues.items()
        }
    finally:
        table.close()


def units_from_commit_log(root: str) -> dict[tuple[str, int], list[tuple[int, int]]]:
    expected: dict[tuple[str, int], list[tuple[int, int]]] = {}
    with CommitLogReader(root) as reader:
        for rec in reader.iter_records(reader.min_offset, include_body=False):
            if not enters_consume_queue(rec.sys_flag):
                continue  # a transaction half message
            expected.setdefault((rec.topic, rec.queue_id), []).append(
                (rec.physical_offset, rec.total_size)
            )
    return expected


async def test_queues_are_rebuilt_to_match_the_commit_log_after_a_crash(
    config: MessageStoreConfig,
) -> None:
    config = sync(config)
    root = config.store_path_root_dir
    async with DefaultMessageStore.open(config) as store:
        for i in range(40):
            await store.put_message(make_msg(body=b"x" * 50, queue_id=i % 3))
        consume = store.consume
        assert consume is not None
        await wait_until(lambda: sum(consume.table.topic_queue_table().values()) == 40)
        # a crash copy: the commit log as it is, queues partly lost and partly too long
        crash = root + "-crash"
        shutil.copytree(root, crash, ignore=shutil.ignore_patterns("lock"))
    shutil.rmtree(os.path.join(crash, "consumequeue", "T1", "1"))
    with contextlib.suppress(FileNotFoundError):  # saved at most once a second
        os.remove(os.path.join(crash, "consumequeue", "dispatched.offset"))
    table = ConsumeQueueTable(crash)
    table.find("T1", 0).append(15, 10**6, 99, 0)  # past the commit log's end, after a hole
    table.close()
    crashed = dataclasses.replace(config, store_path_root_dir=crash)
    async with DefaultMessageStore.open(crashed) as store:
        await trio.lowlevel.checkpoint()
    assert queue_units(crash) == units_from_commit_log(crash)
    assert len(units_from_commit_log(crash)[("T1", 1)]) == 13


async def test_sync_flush_dispatches_nothing_past_the_durable_offset(
    config: MessageStoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    real_sync = MappedFile.sync

    def held_sync(self: MappedFile) -> None:
        release.wait(10)  # the disk has not confirmed yet
        real_sync(self)

    monkeypatch.setattr(MappedFile, "sync", held_sync)
    async with DefaultMessageStore.open(sync(config)) as store:
        consume = store.consume
        assert consume is not None
        result = await store.put_message(make_msg(body=b"unflushed", wait_store_msg_ok=False))
        assert result.status is PutMessageStatus.PUT_OK
        await trio.sleep(0.3)  # several dispatch rounds while the flush is held
        assert store.flushed_where < store.written_offset
        assert consume.max_offset_in_queue("T1", 0) == 0
        release.set()
        await wait_until(lambda: consume.max_offset_in_queue("T1", 0) == 1)
        assert store.flushed_where == store.written_offset


async def test_async_flush_dispatches_written_messages_before_the_flush(
    config: MessageStoreConfig,
) -> None:
    lazy = dataclasses.replace(
        config,
        flush_disk_type=FlushDiskType.ASYNC_FLUSH,
        flush_interval_commit_log_ms=60_000,
        flush_commit_log_thorough_interval_ms=60_000,
    )
    async with DefaultMessageStore.open(lazy) as store:
        consume = store.consume
        assert consume is not None
        for i in range(3):
            await store.put_message(make_msg(body=b"a%d" % i))
        with trio.fail_after(1):  # far sooner than any flush
            await wait_until(lambda: consume.max_offset_in_queue("T1", 0) == 3)
        assert store.flushed_where < store.written_offset
        got = consume.get_message("T1", 0, 0, 10)
        assert [decode_record(m, 0).body for m in got.messages] == [b"a0", b"a1", b"a2"]


async def test_consume_queue_files_follow_the_configured_size(config: MessageStoreConfig) -> None:
    small = dataclasses.replace(sync(config), mapped_file_size_consume_queue=4 * 20)
    async with DefaultMessageStore.open(small) as store:
        for i in range(10):
            await store.put_message(make_msg(body=b"%d" % i))
        consume = store.consume
        assert consume is not None
        await wait_until(lambda: consume.max_offset_in_queue("T1", 0) == 10)
        got = consume.get_message("T1", 0, 3, 10)  # from the middle of the first file
        # across file boundaries (units 3 | 4-7 | 8-9)
        assert [decode_record(m, 0).body for m in got.messages] == [b"%d" % i for i in range(3, 10)]
    queue_dir = pathlib.Path(small.store_path_root_dir, "consumequeue", "T1", "0")
    assert queue_files(queue_dir) == [(f"{base:020d}", 80) for base in (0, 80, 160)]


def queue_files(queue_dir: pathlib.Path) -> list[tuple[str, int]]:
    return [(f.name, f.stat().st_size) for f in sorted(queue_dir.iterdir())]


async def test_units_handed_over_by_the_writer_equal_units_read_from_the_commit_log(
    config: MessageStoreConfig,
) -> None:
    """The running store's units (from the writer) against a rebuild from the commit log:
    batches, segment rolls, a transaction half message, tags set only in the properties."""
    root = config.store_path_root_dir
    async with DefaultMessageStore.open(sync(config)) as store:
        for i in range(30):
            tag = "AB"[i % 2]
            await store.put_message(
                make_msg(body=b"s" * (i * 7), queue_id=i % 2, properties=tags_props(tag))
            )
            if i % 5 == 0:
                batch = [
                    make_msg(body=b"b%d" % j, topic="T2", properties=tags_props("C"))
                    for j in range(3)
                ]
                assert (await store.put_messages(batch)).status is PutMessageStatus.PUT_OK
        await store.put_message(make_msg(body=b"half", sys_flag=TRANSACTION_PREPARED_TYPE))
        consume = store.consume
        assert consume is not None
        await wait_until(lambda: sum(consume.table.topic_queue_table().values()) == 48)
    live = queue_units(root)
    live_codes = {
        key: [u.tags_code for u in table_units] for key, table_units in _codes(root).items()
    }
    shutil.rmtree(os.path.join(root, "consumequeue"))
    async with DefaultMessageStore.open(sync(config)):  # rebuilt from the commit log
        await trio.lowlevel.checkpoint()
    assert queue_units(root) == live == units_from_commit_log(root)
    assert {k: [u.tags_code for u in v] for k, v in _codes(root).items()} == live_codes
    assert set(live_codes[("T1", 0)]) == {java_string_hash("A")}


def _codes(root: str) -> dict[tuple[str, int], list[CqUnit]]:
    table = ConsumeQueueTable(root)
    try:
        return {
            key: queue.read_units(queue.min_logic_offset, queue.max_logic_offset)
            for key, queue in table.queues.items()
        }
    finally:
        table.close()


async def test_offset_by_time_reads_store_times_of_both_host_kinds_not_bodies(
    config: MessageStoreConfig,
) -> None:
    now = [0]
    hosts = [("10.0.0.7", 50000), ("fe80::1", 50001)]
    async with DefaultMessageStore.open(sync(config), now_ms=lambda: now[0]) as store:
        for i in range(6):  # store times 1000, 2000, ... 6000
            now[0] = (i + 1) * 1_000
            msg = make_msg(body=bytes(2048), born_host=hosts[i % 2])
            assert (await store.put_message(msg)).status is PutMessageStatus.PUT_OK
        consume = store.consume
        assert consume is not None
        await wait_until(lambda: consume.max_offset_in_queue("T1", 0) == 6)
        sizes: list[int] = []
        read_bytes = consume.read_bytes

        def counting(offset: int, size: int) -> bytes | None:
            sizes.append(size)
            return read_bytes(offset, size)

        consume.read_bytes = counting  # type: ignore[method-assign]
        stamps = [consume.store_timestamp_at("T1", 0, n) for n in range(6)]
        assert stamps == [1_000, 2_000, 3_000, 4_000, 5_000, 6_000]
        assert consume.offset_by_time("T1", 0, 3_500) == 3
        assert consume.offset_by_time("T1", 0, 0) == 0
        assert consume.offset_by_time("T1", 0, 9_000) == 6
        assert consume.store_timestamp_at("T1", 0, 6) is None
        assert sizes and max(sizes) < 100  # the record heads, never the 2 KiB bodies


async def test_a_topic_named_like_the_dispatch_offset_file_is_an_ordinary_topic(
    config: MessageStoreConfig,
) -> None:
    async with DefaultMessageStore.open(config) as store:
        await store.put_message(make_msg(topic="T1"))
        await trio.sleep(1.2)  # the dispatch offset has been saved
        await store.put_message(make_msg(topic="dispatched"))
        await store.put_message(make_msg(topic="T1"))
        consume = store.consume
        assert consume is not None
        await wait_until(lambda: consume.max_offset_in_queue("T1", 0) == 2)
        assert consume.max_offset_in_queue("dispatched", 0) == 1
    async with DefaultMessageStore.open(config) as store:  # and the store opens again
        reopened = store.consume
        assert reopened is not None
        assert reopened.max_offset_in_queue("dispatched", 0) == 1
        assert reopened.max_offset_in_queue("T1", 0) == 2


async def test_a_dispatch_offset_in_the_old_place_is_read_then_moved(
    config: MessageStoreConfig,
) -> None:
    async with DefaultMessageStore.open(config) as store:
        for _ in range(3):
            await store.put_message(make_msg())
        end = store.max_offset
    root = pathlib.Path(config.store_path_root_dir)
    (root / "consumequeue" / "dispatched.offset").rename(root / "consumequeue" / "dispatched")
    table = ConsumeQueueTable(str(root))
    assert table.saved_dispatch_offset() == end
    table.save_dispatch_offset(end)
    table.close()
    assert not (root / "consumequeue" / "dispatched").exists()
    assert (root / "consumequeue" / "dispatched.offset").read_text() == str(end)


async def test_a_consume_queue_page_lost_in_a_power_cut_is_dispatched_again(
    config: MessageStoreConfig,
) -> None:
    config = dataclasses.replace(config, mapped_file_size_commit_log=1 << 20)
    root = config.store_path_root_dir
    async with DefaultMessageStore.open(config) as store:
        for i in range(600):
            assert (
                await store.put_message(make_msg(b"m%04d" % i))
            ).status is PutMessageStatus.PUT_OK
    cq = os.path.join(root, "consumequeue", "T1", "0", f"{0:020d}")
    patch_file(cq, 4096, bytes(4096))  # units 204..408 never reached the disk, later ones did
    os.remove(os.path.join(root, "consumequeue", "dispatched.offset"))  # saved before them
    touch(os.path.join(root, "abort"))
    with capture_logs() as logs:
        async with DefaultMessageStore.open(config) as store:
            consume = store.consume
            assert consume is not None

            def complete() -> bool:  # once re-dispatch has run: every unit in place
                got = consume.get_message("T1", 0, 0, 600).messages
                return len(got) == 600 and all(len(m) > 0 for m in got)

            await wait_until(complete)
            got = consume.get_message("T1", 0, 0, 600)
            assert [decode_record(m, 0).body for m in got.messages] == [
                b"m%04d" % i for i in range(600)
            ]
    assert [e["event"] for e in logs].count("consume_queue_hole_filled") == 1
