"""Recovery: the no-damage control, torn tails, corruption before the durable end, loading
errors and the directory lock."""

from __future__ import annotations

import dataclasses
import glob
import os
import pathlib
import shutil
import struct

import pytest
from structlog.testing import capture_logs

from store.checkpoint import TOPIC_QUEUE_TABLE_FILE, TopicQueueTableSnapshot, read_flush_offset
from store.config import FlushDiskType, MessageStoreConfig
from store.errors import CommitLogCorruptError, StoreLoadError, StoreLockedError
from store.mapped_file import MappedFile, create_segment_file
from store.message_store import DefaultMessageStore
from store.reader import CommitLogReader
from store.status import PutMessageStatus
from tests.store.conftest import SEGMENT, make_msg, patch_file, read_file, touch, wait_until


async def _fill(config: MessageStoreConfig, count: int = 60) -> list[int]:
    offsets = []
    async with DefaultMessageStore.open(config) as store:
        for i in range(count):
            result = await store.put_message(
                make_msg(b"r%03d" % i + b"." * (i % 200), queue_id=i % 3)
            )
            assert result.append_result is not None
            offsets.append(result.append_result.wrote_offset)
    return offsets


def _snapshot_files(config: MessageStoreConfig) -> dict[str, bytes]:
    paths = sorted(glob.glob(os.path.join(config.store_path_commit_log, "*")))
    return {os.path.basename(path): read_file(path) for path in paths}


def _segment_path(config: MessageStoreConfig, offset: int) -> str:
    return os.path.join(config.store_path_commit_log, f"{offset - offset % SEGMENT:020d}")


def _patch(config: MessageStoreConfig, offset: int, data: bytes) -> None:
    patch_file(_segment_path(config, offset), offset % SEGMENT, data)


async def test_no_damage_comes_back_byte_identical(config: MessageStoreConfig) -> None:
    await _fill(config)
    before = _snapshot_files(config)
    async with DefaultMessageStore.open(config) as store:
        table, end = dict(store.topic_queue_table), store.max_offset
    async with DefaultMessageStore.open(config) as store:
        assert (store.topic_queue_table, store.max_offset) == (table, end)
    assert _snapshot_files(config) == before
    assert table == {"T1-0": 20, "T1-1": 20, "T1-2": 20}


@pytest.mark.parametrize("damage", ["tear", "crc", "unpatched", "properties"])
async def test_torn_tail_is_cut_and_kept_aside(config: MessageStoreConfig, damage: str) -> None:
    offsets = await _fill(config)
    last = offsets[-1]
    with CommitLogReader(config.store_path_root_dir) as reader:
        last_record = next(iter(reader.iter_records(last)))
    if damage == "tear":  # the second half of the record never reached the disk
        _patch(config, last + last_record.total_size // 2, bytes(last_record.total_size // 2 + 1))
    elif damage == "crc":
        _patch(config, last + 88, b"X")
    elif damage == "properties":  # only the last bytes (properties; the CRC covers the body)
        assert last_record.properties
        _patch(config, last + last_record.total_size - 3, bytes(3))
    else:  # copied, but the offsets were never patched in
        _patch(config, last + 28, struct.pack(">q", 0))
    touch(os.path.join(config.store_path_root_dir, "abort"))  # it crashed
    async with DefaultMessageStore.open(config) as store:
        assert store.max_offset == store.flushed_where == last
        assert store.topic_queue_table["T1-2"] == 19  # the cut record was queue offset 19
        result = await store.put_message(make_msg(b"after", queue_id=2))
        assert result.append_result is not None
        assert (
            result.append_result.wrote_offset == last and result.append_result.logics_offset == 19
        )
    sides = glob.glob(_segment_path(config, last) + ".truncated-*")
    assert sides == [f"{_segment_path(config, last)}.truncated-{last}"]
    assert read_file(sides[0])[:4] == struct.pack(">i", last_record.total_size)
    with CommitLogReader(config.store_path_root_dir) as reader:
        bodies = [r.body for r in reader.iter_records(0)]
    assert len(bodies) == 60 and bodies[-1] == b"after"


async def test_mid_log_corruption_stops_startup(config: MessageStoreConfig) -> None:
    offsets = await _fill(config)
    # After a crash recovery scans from the checkpoint; take a record there with records after it.
    last_base = offsets[-1] - offsets[-1] % SEGMENT
    bad = next(o for o in offsets if o > last_base)
    _patch(config, bad + 88, b"X")
    touch(os.path.join(config.store_path_root_dir, "abort"))
    with pytest.raises(CommitLogCorruptError) as caught:
        async with DefaultMessageStore.open(config):
            pass
    assert caught.value.offset == bad
    assert caught.value.file_name == _segment_path(config, bad)
    assert str(bad) in str(caught.value) and f"{bad - bad % SEGMENT:020d}" in str(caught.value)
    # Unchanged on disk; the operator may choose to cut there.
    truncating = dataclasses.replace(config, recover_truncate_corrupt=True)
    async with DefaultMessageStore.open(truncating) as store:
        assert store.max_offset == bad
        index = offsets.index(bad)
        assert sum(store.topic_queue_table.values()) == index


async def test_a_clean_stop_is_recovered_without_a_scan_then_checked_in_the_background(
    config: MessageStoreConfig,
) -> None:
    offsets = await _fill(config)
    with capture_logs() as logs:
        async with DefaultMessageStore.open(config) as store:
            await wait_until(lambda: any(e["event"] == "commit_log_verified" for e in logs))
            end = store.max_offset
            assert read_flush_offset(config.store_path_root_dir) == (end, end, SEGMENT)
    recovered = next(e for e in logs if e["event"] == "commit_log_recovered")
    assert recovered["stopped"] == "clean"
    verified = next(e for e in logs if e["event"] == "commit_log_verified")
    assert verified["end"] == recovered["offset"] and verified["start"] < offsets[-1]
    # Bit rot after the stop: the broker starts (nothing to cut after a clean stop), and the
    # check names the damaged record.
    bad = next(o for o in offsets if o > offsets[-1] - offsets[-1] % SEGMENT)
    _patch(config, bad + 88, b"X")
    with capture_logs() as logs:
        async with DefaultMessageStore.open(config) as store:
            await wait_until(lambda: any(e["event"] == "commit_log_corrupt" for e in logs))
            assert (await store.put_message(make_msg(b"still-serving"))).status is (
                PutMessageStatus.PUT_OK
            )
    corrupt = next(e for e in logs if e["event"] == "commit_log_corrupt")
    assert (corrupt["offset"], corrupt["file"]) == (bad, _segment_path(config, bad))
    assert corrupt["log_level"] == "error"


async def test_metadata_that_disagree_send_recovery_down_the_scan(
    config: MessageStoreConfig,
) -> None:
    offsets = await _fill(config)
    snapshot = TopicQueueTableSnapshot.load(config.store_path_root_dir)
    assert snapshot is not None
    # A snapshot from an earlier moment: the clean-stop path must not trust it.
    TopicQueueTableSnapshot(offsets[10], {"T1-0": 1}).write(config.store_path_root_dir)
    with capture_logs() as logs:
        async with DefaultMessageStore.open(config) as store:
            assert store.topic_queue_table == snapshot.table
    recovered = next(e for e in logs if e["event"] == "commit_log_recovered")
    assert recovered["stopped"] != "clean"


async def test_abnormal_recovery_rebuilds_the_table(config: MessageStoreConfig) -> None:
    config = dataclasses.replace(config, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    await _fill(config, 40)
    os.unlink(os.path.join(config.store_path_root_dir, TOPIC_QUEUE_TABLE_FILE))
    touch(os.path.join(config.store_path_root_dir, "abort"))
    async with DefaultMessageStore.open(config) as store:
        assert store.topic_queue_table == {"T1-0": 14, "T1-1": 13, "T1-2": 13}


async def test_snapshot_ahead_of_the_log_is_ignored(config: MessageStoreConfig) -> None:
    offsets = await _fill(config, 30)
    TopicQueueTableSnapshot(offsets[-1] + 10_000, {"T1-0": 99}).write(config.store_path_root_dir)
    async with DefaultMessageStore.open(config) as store:
        assert store.topic_queue_table == {"T1-0": 10, "T1-1": 10, "T1-2": 10}


async def test_recovery_rewrites_the_flush_offset(config: MessageStoreConfig) -> None:
    offsets = await _fill(config, 30)
    _patch(config, offsets[-1] + 4, bytes(4))  # the last record lost its magic
    touch(os.path.join(config.store_path_root_dir, "abort"))  # in a crash
    async with DefaultMessageStore.open(config) as store:
        assert read_flush_offset(config.store_path_root_dir) == (offsets[-1], offsets[-1], SEGMENT)
        assert store.max_offset == offsets[-1]


async def test_segment_of_wrong_length_refuses_to_load(config: MessageStoreConfig) -> None:
    await _fill(config, 30)
    path = _segment_path(config, SEGMENT)
    os.truncate(path, SEGMENT - 1)
    with pytest.raises(StoreLoadError, match=r"00000000000000004096.*length 4095"):
        async with DefaultMessageStore.open(config):
            pass


async def test_gap_between_segments_refuses_to_load(config: MessageStoreConfig) -> None:
    await _fill(config, 60)
    os.unlink(_segment_path(config, SEGMENT))
    with pytest.raises(StoreLoadError, match=r"00000000000000008192.*gap"):
        async with DefaultMessageStore.open(config):
            pass


async def test_second_store_on_the_same_directory_fails(config: MessageStoreConfig) -> None:
    async with DefaultMessageStore.open(config) as store:
        with pytest.raises(StoreLockedError, match="in use by another broker"):
            async with DefaultMessageStore.open(config):
                pass
        assert (await store.put_message(make_msg())).status is PutMessageStatus.PUT_OK
    async with DefaultMessageStore.open(config) as store:  # released on close
        assert store.max_offset > 0


def test_a_second_cut_at_the_same_offset_keeps_the_first_side_file(tmp_path: pathlib.Path) -> None:
    from store.mapped_file import MappedFile, create_segment_file
    from store.recovery import _cut

    path = str(tmp_path / f"{0:020d}")
    create_segment_file(path, 4096)
    segment = MappedFile(path, 4096)
    try:
        segment.mm[100:110] = b"first-torn"
        first = _cut(segment, 100, 100)
        segment.mm[100:111] = b"second-torn"
        second = _cut(segment, 100, 100)
    finally:
        segment.close()
    assert first is not None and second is not None and first != second
    assert pathlib.Path(first).read_bytes() == b"first-torn"
    assert pathlib.Path(second).read_bytes() == b"second-torn"


class _Killed(BaseException):
    """The process dies here."""


async def test_a_crash_while_dirty_segments_are_removed_leaves_a_store_that_opens(
    config: MessageStoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with DefaultMessageStore.open(config) as store:
        await store.put_message(make_msg())
    for base in (SEGMENT, 2 * SEGMENT):  # empty segments a crash left after the data
        create_segment_file(os.path.join(config.store_path_commit_log, f"{base:020d}"), SEGMENT)
    touch(os.path.join(config.store_path_root_dir, "abort"))
    real_destroy = MappedFile.destroy
    destroyed: list[str] = []

    def destroy_then_die(self: MappedFile) -> None:
        destroyed.append(self.file_name)
        if len(destroyed) == 2:
            raise _Killed  # killed between the two unlinks
        real_destroy(self)

    monkeypatch.setattr(MappedFile, "destroy", destroy_then_die)
    with pytest.raises(_Killed):
        async with DefaultMessageStore.open(config):
            pass
    monkeypatch.setattr(MappedFile, "destroy", real_destroy)
    async with DefaultMessageStore.open(config) as store:
        assert store.max_offset > 0


async def test_a_snapshot_left_ahead_by_a_cut_is_not_trusted_after_the_log_regrows(
    config: MessageStoreConfig,
) -> None:
    config = dataclasses.replace(config, checkpoint_interval_ms=1000)
    root = config.store_path_root_dir
    offsets = []
    async with DefaultMessageStore.open(config) as store:
        for i in range(60):
            result = await store.put_message(make_msg(b"r%03d" % i, queue_id=i % 3))
            assert result.append_result is not None
            offsets.append(result.append_result.wrote_offset)
        end = store.max_offset
    cut = next(o for o in offsets if o >= end - end % SEGMENT)  # the last segment's first record
    segment = os.path.join(config.store_path_commit_log, f"{cut - cut % SEGMENT:020d}")
    patch_file(segment, cut % SEGMENT, bytes(SEGMENT - cut % SEGMENT))  # its data is lost
    touch(os.path.join(root, "abort"))  # in a crash
    async with DefaultMessageStore.open(config) as store:
        assert store.max_offset == cut
        expected = dict(store.topic_queue_table)
        while store.max_offset <= end + 200:  # past the old snapshot's offset, queue 0 only
            await store.put_message(make_msg(b"new", queue_id=0))
        expected["T1-0"] = store.topic_queue_table["T1-0"]
        crash = root + "-crash"  # the process dies here: the directory as it stands
        shutil.copytree(root, crash, ignore=shutil.ignore_patterns("lock"))
    touch(os.path.join(crash, "abort"))
    async with DefaultMessageStore.open(
        dataclasses.replace(config, store_path_root_dir=crash)
    ) as s:
        assert s.topic_queue_table == expected
