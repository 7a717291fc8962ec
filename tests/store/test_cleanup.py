"""Retention on a real store: which segments go, when, in what order, and what moves with the
log's first offset (consume-queue files and minimums, reads below it, a reopened store)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import pytest
import trio
from structlog.testing import capture_logs

from store import cleanup, status
from store.cleanup import DELETE_FILES_BATCH_MAX, DeleteReason
from store.config import FlushDiskType, MessageStoreConfig
from store.decode import decode_record
from store.flush import thread_flusher
from store.get_message import GetMessageStatus
from store.mapped_file import MappedFile
from store.message_store import DefaultMessageStore
from store.reader import CommitLogReader, SegmentGoneError
from store.segment_view import open_segment
from store.status import PutMessageStatus

from .conftest import body_for_record_size, make_msg, wait_until

HOUR_S = 3600
#: records of 1 KiB: four fill a 4 KiB segment but for the end-of-file blank, so three per segment
RECORD = 1024


@pytest.fixture
def retention(config: MessageStoreConfig) -> MessageStoreConfig:
    """SYNC_FLUSH (flushed = written), the periodic round out of the way (tests run rounds),
    delete hour 4, 10 units per consume-queue file."""
    return dataclasses.replace(
        config,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        clean_resource_interval=3_600_000,
        delete_when="4",
        delete_physic_files_interval=0,
        delete_consume_queue_files_interval=0,
        mapped_file_size_consume_queue=200,
    )


async def fill(store: DefaultMessageStore, segments: int, queues: int = 1) -> list[int]:
    """Put 1 KiB records until `segments` segments exist; their queue offsets' physical
    offsets, in order."""
    offsets: list[int] = []
    body = body_for_record_size(RECORD)
    while store.segment_count < segments:
        result = await store.put_message(make_msg(body=body, queue_id=len(offsets) % queues))
        assert result.status is PutMessageStatus.PUT_OK
        assert result.append_result is not None
        offsets.append(result.append_result.wrote_offset)
    return offsets


def age(store: DefaultMessageStore, count: int, seconds: float) -> None:
    """Make the first `count` segments look last modified `seconds` ago."""
    past = os.path.getmtime(store.mapped_file_queue.mapped_files[0].file_name) - seconds
    for mapped_file in store.mapped_file_queue.mapped_files[:count]:
        os.utime(mapped_file.file_name, (past, past))


def at_hour(store: DefaultMessageStore, hour: int) -> None:
    store.clean_commit_log.hour = lambda: hour


async def expired(store: DefaultMessageStore, segments: int, *, old: int, hour: int) -> list[int]:
    """`fill` up to `segments`, dispatched, the first `old` expired, the clock at `hour`."""
    offsets = await fill(store, segments)
    await settle(store)
    age(store, old, 100 * HOUR_S)
    at_hour(store, hour)
    return offsets


async def settle(store: DefaultMessageStore) -> None:
    """Let dispatch catch up with the flushed log (SYNC_FLUSH dispatches after the flush)."""
    consume = store.consume
    assert consume is not None
    await wait_until(lambda: consume.dispatched_offset >= store.flushed_where)


def exists(path: str) -> bool:
    return os.path.exists(path)


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


async def test_expired_segments_go_oldest_first_at_a_delete_hour(
    retention: MessageStoreConfig,
) -> None:
    async with DefaultMessageStore.open(retention) as store:
        await fill(store, 6)
        await settle(store)
        age(store, 3, 73 * HOUR_S)  # the three oldest are past the 72 hours
        first_names = [f.file_name for f in store.mapped_file_queue.mapped_files[:3]]
        at_hour(store, 5)
        assert await store.clean_commit_log.run_round() == 0  # not a delete hour, disk fine
        at_hour(store, 4)
        with capture_logs() as logs:
            assert await store.clean_commit_log.run_round() == 3
        assert not any(exists(name) for name in first_names)
        assert store.min_offset == 3 * store.config.mapped_file_size_commit_log
        events = [e for e in logs if e["event"] == "segment_deleted"]
        assert [e["file"] for e in events] == first_names
        assert {e["reason"] for e in events} == {"expired"}
        assert store.segments_deleted == {"expired": 3}
        assert await store.clean_commit_log.run_round() == 0  # the rest is not expired


async def test_the_segment_being_written_is_never_deleted(retention: MessageStoreConfig) -> None:
    async with DefaultMessageStore.open(retention) as store:
        await expired(store, 3, old=3, hour=4)
        assert await store.clean_commit_log.run_round() == 2
        assert store.segment_count == 1
        result = await store.put_message(make_msg(body=b"after"))
        assert result.status is PutMessageStatus.PUT_OK


async def test_nothing_past_the_flushed_offset_is_deleted(
    retention: MessageStoreConfig,
) -> None:
    # ASYNC_FLUSH whose flushes wait at a gate: everything is written, nothing flushed.
    config = dataclasses.replace(retention, flush_disk_type=FlushDiskType.ASYNC_FLUSH)
    gate = trio.Event()

    async def gated(mapped_file: MappedFile) -> None:
        await gate.wait()
        await thread_flusher(mapped_file)

    async with DefaultMessageStore.open(config, flusher=gated) as store:
        await fill(store, 4)
        age(store, 4, 100 * HOUR_S)
        at_hour(store, 4)
        assert store.flushed_where == 0
        assert await store.clean_commit_log.run_round() == 0
        assert store.min_offset == 0
        gate.set()
        last = store.mapped_file_queue.mapped_files[-1].file_from_offset
        await wait_until(lambda: store.flushed_where >= last)  # the full segments are flushed
        assert await store.clean_commit_log.run_round() == 3


async def test_a_round_deletes_a_bounded_number_with_a_pause_between(
    retention: MessageStoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = dataclasses.replace(retention, delete_physic_files_interval=7)
    pauses: list[float] = []
    real_sleep = trio.sleep

    async def recording_sleep(seconds: float) -> None:
        pauses.append(seconds)
        await real_sleep(seconds)

    async with DefaultMessageStore.open(config) as store:
        await expired(store, DELETE_FILES_BATCH_MAX + 4, old=DELETE_FILES_BATCH_MAX + 3, hour=4)
        monkeypatch.setattr(trio, "sleep", recording_sleep)
        assert await store.clean_commit_log.run_round() == DELETE_FILES_BATCH_MAX
        assert pauses.count(0.007) == DELETE_FILES_BATCH_MAX
        assert await store.clean_commit_log.run_round() == 3
        assert store.segment_count == 1


async def test_disk_above_the_max_used_ratio_deletes_expired_at_any_hour(
    retention: MessageStoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cleanup, "store_disk_ratio", lambda _: 0.80)
    async with DefaultMessageStore.open(retention) as store:
        await expired(store, 5, old=2, hour=11)
        assert await store.clean_commit_log.run_round() == 2  # expired only: 80 % < 85 %
        assert store.disk_ratio == 0.80
        assert not store.running_flags.is_set(status.DISK_FULL)


def segments_ratio(store: DefaultMessageStore, percent: int) -> Callable[[object], float]:
    """A disk 50 % full, plus `percent` for each file in the commit log's directory."""
    return lambda _: (50 + percent * len(os.listdir(store.config.store_path_commit_log))) / 100


async def test_a_full_disk_deletes_the_oldest_until_under_the_clean_forcibly_ratio(
    retention: MessageStoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with DefaultMessageStore.open(retention) as store:
        await fill(store, 8)
        await settle(store)
        # 8 segments (+1 pre-created) make 0.95: full. Each one deleted takes 0.05 off.
        monkeypatch.setattr(cleanup, "store_disk_ratio", segments_ratio(store, 5))
        store.running_flags.set(status.DISK_FULL)
        at_hour(store, 11)
        first = store.mapped_file_queue.mapped_files[0].file_name
        with capture_logs() as logs:
            deleted = await store.clean_commit_log.run_round()
        # Forced while above 0.85: 0.95 -> 0.90 -> 0.85, then the rest is kept (none expired).
        assert deleted == 2
        assert store.segments_deleted == {"forced": 2}
        assert not exists(first)
        assert not store.running_flags.is_set(status.DISK_FULL)  # cleared by the round itself
        assert {e["reason"] for e in logs if e["event"] == "segment_deleted"} == {"forced"}
        result = await store.put_message(make_msg(body=b"resumed"))
        assert result.status is PutMessageStatus.PUT_OK


async def test_forced_cleanup_can_be_switched_off(
    retention: MessageStoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = dataclasses.replace(retention, clean_file_forcibly_enable=False)
    monkeypatch.setattr(cleanup, "store_disk_ratio", lambda _: 0.97)
    async with DefaultMessageStore.open(config) as store:
        await fill(store, 4)
        await settle(store)
        with capture_logs() as logs:
            assert await store.clean_commit_log.run_round() == 0
        assert store.running_flags.is_set(status.DISK_FULL)
        assert [e for e in logs if e["event"] == "disk_space_low_nothing_deletable"]


async def test_a_manual_request_deletes_expired_segments_at_any_hour_at_once(
    retention: MessageStoreConfig,
) -> None:
    async with DefaultMessageStore.open(retention) as store:
        await expired(store, 4, old=2, hour=11)
        assert await store.clean_commit_log.run_round() == 0
        store.execute_delete_files_manually()  # the periodic round runs now, not in an hour
        await wait_until(lambda: store.segments_deleted == {"manual": 2})
        assert 0 < store.clean_commit_log.manual_rounds < cleanup.MANUAL_DELETE_ROUNDS


async def test_a_segment_a_reader_maps_waits_for_it(retention: MessageStoreConfig) -> None:
    async with DefaultMessageStore.open(retention) as store:
        await expired(store, 4, old=2, hour=4)
        first = store.mapped_file_queue.mapped_files[0]
        view = open_segment(first.file_name)  # what `inspect` or the Spark source holds
        assert view is not None
        try:
            with capture_logs() as logs:
                assert await store.clean_commit_log.run_round() == 0
            assert exists(first.file_name)
            assert [e["event"] for e in logs if "segment" in e["event"]] == [
                "segment_delete_deferred"
            ]
            # Gone for readers of the store at once, and nothing after it goes first.
            assert store.min_offset == store.config.mapped_file_size_commit_log
        finally:
            view.close()
        assert await store.clean_commit_log.run_round() == 2  # the reader is done: both go
        assert not exists(first.file_name)


async def test_a_reader_past_the_forcible_interval_loses_the_name_not_the_pages(
    retention: MessageStoreConfig,
) -> None:
    config = dataclasses.replace(retention, destroy_mapped_file_interval_forcibly=0)
    async with DefaultMessageStore.open(config) as store:
        await expired(store, 3, old=1, hour=4)
        first = store.mapped_file_queue.mapped_files[0]
        before = read_bytes(first.file_name)
        view = open_segment(first.file_name)
        assert view is not None
        with capture_logs() as logs:
            assert await store.clean_commit_log.run_round() == 1
        assert [e for e in logs if e["event"] == "segment_deleted_while_in_use"]
        assert not exists(first.file_name)
        assert view.mm[:] == before  # still mapped, still the same bytes: no SIGBUS
        view.close()


async def test_an_in_process_hold_defers_the_deletion(retention: MessageStoreConfig) -> None:
    async with DefaultMessageStore.open(retention) as store:
        await expired(store, 3, old=1, hour=4)
        first = store.mapped_file_queue.mapped_files[0]
        assert first.hold()
        assert await store.clean_commit_log.run_round() == 0
        assert not first.hold()  # deletion has begun: no new hold
        first.release()
        assert await store.clean_commit_log.run_round() == 1
        assert store.clean_commit_log.dying == []


async def test_reads_below_the_new_first_offset(retention: MessageStoreConfig) -> None:
    async with DefaultMessageStore.open(retention) as store:
        offsets = await expired(store, 5, old=2, hour=4)
        assert await store.clean_commit_log.run_round() == 2
        consume = store.consume
        assert consume is not None
        kept = [o for o in offsets if o >= store.min_offset]
        first_kept = len(offsets) - len(kept)
        # Before the consume-queue round the units are there, their records are not: a pull
        # steps over them to the first records kept.
        removing = consume.get_message("T1", 0, 0, 2)
        assert removing.status is GetMessageStatus.FOUND
        assert [decode_record(m, 0).physical_offset for m in removing.messages] == kept[:2]
        assert removing.next_begin_offset == first_kept + 2
        assert store.clean_consume_queue is not None
        await store.clean_consume_queue.run_round()
        assert consume.min_offset_in_queue("T1", 0) == first_kept
        moved = consume.get_message("T1", 0, 0, 4)
        assert moved.status is GetMessageStatus.OFFSET_TOO_SMALL
        assert moved.next_begin_offset == first_kept
        found = consume.get_message("T1", 0, first_kept, 32)
        assert found.status is GetMessageStatus.FOUND
        assert [decode_record(m, 0).physical_offset for m in found.messages] == kept
        assert consume.offset_by_time("T1", 0, 0) == first_kept
        with CommitLogReader(store.config.store_path_root_dir) as reader:
            assert reader.min_offset == store.min_offset
            assert [r.physical_offset for r in reader.iter_records(reader.min_offset)] == kept
            with pytest.raises(SegmentGoneError):
                list(reader.iter_records(0))


async def test_consume_queue_files_below_the_log_go_and_the_minimum_survives_a_restart(
    retention: MessageStoreConfig,
) -> None:
    async with DefaultMessageStore.open(retention) as store:
        offsets = await fill(store, 12)  # 10 units a consume-queue file: three files
        await settle(store)
        age(store, 8, 100 * HOUR_S)
        at_hour(store, 4)
        assert await store.clean_commit_log.run_round() == 8
        assert store.clean_consume_queue is not None
        assert await store.clean_consume_queue.run_round() == 2
        cq_dir = os.path.join(retention.store_path_root_dir, "consumequeue", "T1", "0")
        assert sorted(os.listdir(cq_dir)) == ["00000000000000000400", "00000000000000000600"]
        first_kept = sum(1 for o in offsets if o < store.min_offset)
        consume = store.consume
        assert consume is not None
        assert consume.min_offset_in_queue("T1", 0) == first_kept
        min_offset = store.min_offset
    async with DefaultMessageStore.open(retention) as again:
        assert again.min_offset == min_offset
        consume = again.consume
        assert consume is not None
        assert consume.min_offset_in_queue("T1", 0) == first_kept
        assert consume.max_offset_in_queue("T1", 0) == len(offsets)
        result = await again.put_message(make_msg(body=b"next"))
        assert result.append_result is not None
        assert result.append_result.logics_offset == len(offsets)


async def test_a_queue_whose_records_all_went_goes_on_from_its_end(
    retention: MessageStoreConfig,
) -> None:
    async with DefaultMessageStore.open(retention) as store:
        for i in range(3):
            await store.put_message(make_msg(topic="Old", body=b"old%d" % i))
        await expired(store, 4, old=3, hour=4)
        assert await store.clean_commit_log.run_round() == 3
        assert store.clean_consume_queue is not None
        await store.clean_consume_queue.run_round()
        consume = store.consume
        assert consume is not None
        assert consume.min_offset_in_queue("Old", 0) == consume.max_offset_in_queue("Old", 0) == 3
    # Without the snapshot of the table, only the consume queue still knows where "Old" was.
    os.unlink(os.path.join(retention.store_path_root_dir, "config", "topicQueueTable.msgpack"))
    async with DefaultMessageStore.open(retention) as again:
        result = await again.put_message(make_msg(topic="Old", body=b"new"))
        assert result.append_result is not None
        assert result.append_result.logics_offset == 3


def test_the_delete_hours_are_checked() -> None:
    assert MessageStoreConfig(delete_when="04").delete_hours() == {4}
    assert MessageStoreConfig(delete_when="1; 13;23").delete_hours() == {1, 13, 23}
    for bad in ("", "24", "4;", "four", "-1", "٤"):
        with pytest.raises(ValueError, match="delete_when"):
            MessageStoreConfig(delete_when=bad)
    with pytest.raises(ValueError, match="file_reserved_time"):
        MessageStoreConfig(file_reserved_time=0)
    assert MessageStoreConfig(file_reserved_time=0.001).file_reserved_time == 0.001


def test_every_reason_has_a_name() -> None:
    assert [r.value for r in DeleteReason] == ["expired", "forced", "manual"]
