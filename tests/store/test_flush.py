"""Flush services: group commit, timeouts, failing flushes, the async schedule, write buffers."""

from __future__ import annotations

import dataclasses
import errno
import os
import threading

import pytest
import trio
import trio.testing
from structlog.testing import capture_logs

from store.checkpoint import read_flush_offset
from store.config import FlushDiskType, MessageStoreConfig
from store.decode import decode_record
from store.flush import thread_flusher
from store.mapped_file import MappedFile
from store.message import PutMessageResult
from store.message_store import DefaultMessageStore
from store.reader import CommitLogReader
from store.status import PutMessageStatus
from tests.store.conftest import make_msg, wait_until


def _sync(config: MessageStoreConfig) -> MessageStoreConfig:
    return dataclasses.replace(
        config,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        mapped_file_size_commit_log=1 << 20,
        checkpoint_interval_ms=1000,
    )


async def test_group_commit_uses_far_fewer_flushes(config: MessageStoreConfig) -> None:
    config = _sync(config)
    flushes: list[int] = []

    async def counting_flusher(mapped_file: MappedFile) -> None:
        flushes.append(mapped_file.wrote_position)
        await trio.sleep(0.005)
        await thread_flusher(mapped_file)

    producers = 64
    statuses: list[PutMessageStatus] = []
    async with DefaultMessageStore.open(config, flusher=counting_flusher) as store:

        async def put(i: int) -> None:
            result = await store.put_message(make_msg(b"%d" % i))
            statuses.append(result.status)
            assert result.append_result is not None
            end = result.append_result.wrote_offset + result.append_result.wrote_bytes
            assert store.flushed_where >= end  # acknowledged only once a flush covered it

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for i in range(producers):
                    nursery.start_soon(put, i)
        assert read_flush_offset(config.store_path_root_dir) == (
            store.flushed_where,
            store.max_offset,
            1 << 20,
        )
    assert statuses == [PutMessageStatus.PUT_OK] * producers
    assert 1 <= len(flushes) <= producers // 4


async def test_flush_timeout(
    config: MessageStoreConfig, mock_clock: trio.testing.MockClock
) -> None:
    config = _sync(config)

    async def slow_flusher(mapped_file: MappedFile) -> None:
        await trio.sleep(60)

    slow: list[tuple[float, PutMessageStatus]] = []

    def on_slow_put(elapsed_ms: float, result: PutMessageResult) -> None:
        slow.append((elapsed_ms, result.status))

    async with DefaultMessageStore.open(
        config, flusher=slow_flusher, on_slow_put=on_slow_put
    ) as store:
        first = await store.put_message(make_msg(wait_store_msg_ok=False))  # creates the segment
        assert first.status is PutMessageStatus.PUT_OK
        started = trio.current_time()
        result = await store.put_message(make_msg())
        assert result.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        assert result.append_result is not None  # appended, not yet durable
        assert trio.current_time() - started == 5.0
        unwaited = await store.put_message(make_msg(wait_store_msg_ok=False))
        assert unwaited.status is PutMessageStatus.PUT_OK
        assert store.flushed_where == 0
        assert slow == [(5000.0, PutMessageStatus.FLUSH_DISK_TIMEOUT)]
        assert store.stats.slow_puts == 1
        assert store.stats.put_count_by_status[PutMessageStatus.FLUSH_DISK_TIMEOUT] == 1


async def test_failing_flush_is_never_acknowledged(config: MessageStoreConfig) -> None:
    config = _sync(config)

    async def failing_flusher(mapped_file: MappedFile) -> None:
        raise OSError(errno.EIO, "Input/output error")

    with capture_logs() as logs:
        async with DefaultMessageStore.open(config, flusher=failing_flusher) as store:
            async with trio.open_nursery() as nursery:
                results: list[PutMessageStatus] = []

                async def put() -> None:
                    results.append((await store.put_message(make_msg())).status)

                for _ in range(8):
                    nursery.start_soon(put)
            assert PutMessageStatus.PUT_OK not in results
            assert set(results) <= {PutMessageStatus.SERVICE_NOT_AVAILABLE}
            assert not store.running_flags.is_writeable()
            assert store.flushed_where == 0
            assert (
                await store.put_message(make_msg())
            ).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert [entry["event"] for entry in logs].count("commit_log_flush_failed") == 1
    assert "abort" in os.listdir(config.store_path_root_dir)  # the next start recovers
    assert read_flush_offset(config.store_path_root_dir)[0] == 0  # type: ignore[index]


async def test_async_flush_schedule(
    config: MessageStoreConfig, mock_clock: trio.testing.MockClock
) -> None:
    config = dataclasses.replace(
        config, mapped_file_size_commit_log=1 << 20, checkpoint_interval_ms=1000
    )
    flush_times: list[float] = []

    async def recording_flusher(mapped_file: MappedFile) -> None:
        flush_times.append(trio.current_time())

    async with DefaultMessageStore.open(config, flusher=recording_flusher) as store:
        opened = trio.current_time()
        result = await store.put_message(make_msg())  # one page: waits for the thorough flush
        assert result.status is PutMessageStatus.PUT_OK and trio.current_time() == opened
        await trio.sleep(12)
        assert [t - opened for t in flush_times] == [10.0]
        await store.put_message(make_msg(b"x" * 5 * 4096))  # four new pages: the next 500 ms round
        await trio.sleep(0.6)
        assert [t - opened for t in flush_times] == [10.0, 12.5]
        assert store.flushed_where == store.max_offset


async def test_transient_store_pool(config: MessageStoreConfig) -> None:
    config = dataclasses.replace(
        config, transient_store_pool_enable=True, transient_store_pool_size=2
    )
    async with DefaultMessageStore.open(config) as store:
        assert store.pool is not None
        offsets = []
        for i in range(60):
            result = await store.put_message(make_msg(b"p" * 200, queue_id=i % 2))
            assert result.status is PutMessageStatus.PUT_OK and result.append_result is not None
            offsets.append(result.append_result.wrote_offset)
        assert store.max_offset <= store.written_offset  # readers see committed data only
        await wait_until(lambda: store.max_offset >= store.written_offset)
        assert store.commit_real_time is not None and store.commit_real_time.commit_count > 0
        assert store.pool.allocated <= 2
    with CommitLogReader(config.store_path_root_dir) as reader:
        assert [r.physical_offset for r in reader.iter_records(0)] == offsets


async def test_a_failed_commit_stops_puts_and_leaves_the_store_running(
    config: MessageStoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_commit(self: MappedFile, start: int, end: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(MappedFile, "commit_range", failing_commit)
    config = dataclasses.replace(config, transient_store_pool_enable=True)
    with capture_logs() as logs:
        async with DefaultMessageStore.open(config) as store:
            assert (await store.put_message(make_msg())).status is PutMessageStatus.PUT_OK
            await wait_until(lambda: not store.running_flags.is_writeable())
            refused = await store.put_message(make_msg())
            assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    failures = [e for e in logs if e["event"] == "commit_log_flush_failed"]
    assert len(failures) == 1 and "Input/output error" in failures[0]["error"]


async def test_records_still_in_a_write_buffer_are_not_served_after_a_roll(
    config: MessageStoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    real_commit = MappedFile.commit_range

    def slow_commit(self: MappedFile, start: int, end: int) -> None:
        release.wait(10)  # a slow disk: the copy into the file has not happened yet
        real_commit(self, start, end)

    monkeypatch.setattr(MappedFile, "commit_range", slow_commit)
    config = dataclasses.replace(config, transient_store_pool_enable=True)
    try:
        async with DefaultMessageStore.open(config) as store:
            for i in range(40):  # about 4.5 KiB: rolls into the second 4 KiB segment
                await store.put_message(make_msg(b"w%03d" % i))
            assert store.segment_count == 2
            assert store.max_offset == store.mapped_file_queue.committed_where < 4096
            consume = store.consume
            assert consume is not None
            await trio.sleep(0.3)  # dispatch had its chances
            early = consume.get_message("T1", 0, 0, 1)
            release.set()
            # nothing yet, or the real record: never bytes the file does not hold yet
            for data in early.messages:
                assert decode_record(data, 0).body == b"w000"
            await wait_until(lambda: consume.max_offset_in_queue("T1", 0) == 40)
            late = consume.get_message("T1", 0, 0, 40)
            assert [decode_record(m, 0).body for m in late.messages] == [
                b"w%03d" % i for i in range(40)
            ]
    finally:
        release.set()
