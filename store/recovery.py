"""Recovery of the commit log at startup (RocketMQ `CommitLog.recoverNormally` /
`recoverAbnormally`, `MappedFileQueue.truncateDirtyFiles`).

Owns deciding where the valid log ends, cutting what follows (the cut bytes are kept beside the
segment as `<segment>.truncated-<offset>`), telling a torn tail from corruption before the durable
end, and rebuilding the topic-queue table. Synchronous: the store runs it in a worker thread.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass, field

import structlog

from store.checkpoint import (
    StoreCheckpoint,
    TopicQueueTableSnapshot,
    abort_file_exists,
    read_flush_offset,
)
from store.config import MessageStoreConfig
from store.decode import check_message_and_return_size, find_record_boundary
from store.deleted_topics import DeletedTopics
from store.errors import CommitLogCorruptError, RecoveryStoppedError
from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue
from store.message import enters_consume_queue

log = structlog.get_logger()

NORMAL_RECOVERY_FILES = 3
PROGRESS_EVERY_FILES = 4
#: the scan looks at its stop event every this many records (and at every segment)
STOP_CHECK_RECORDS = 4096
_CHUNK = 1 << 20
#: bytes after a clean stop's end that must still be zeros
_TAIL_PROBE = 4096


@dataclass(slots=True)
class RecoveryResult:
    """Where the log ends, the rebuilt table and what was cut."""

    process_offset: int
    topic_queue_table: dict[str, int]
    abnormal: bool
    scanned_from: int
    truncated_files: list[str] = field(default_factory=list)
    #: a clean stop's log was not scanned: the records from here to `process_offset` are
    #: checked in the background (`verify_tail`)
    verify_from: int | None = None
    #: where the last record below `process_offset` starts (-1: none)
    last_record: int = -1


@dataclass(slots=True)
class _Scan:
    process_offset: int
    bad_index: int | None = None
    reason: str = ""
    last_record: int = -1  # where the last valid record starts


def _scan(
    files: list[MappedFile],
    start: int,
    table: dict[str, int],
    check_crc: bool,
    stop: threading.Event | None = None,
    *,
    end: int | None = None,
    pause_s: float = 0.0,
    deleted: DeletedTopics | None = None,
) -> _Scan:
    """Walk records from file `start`; stop at the first one that fails validation, or at
    `end` when given. Sleeps `pause_s` every few thousand records (a background check).

    Raises RecoveryStoppedError once `stop` is set: the walk only reads, so that is always safe.
    """
    total_files = len(files) - start
    countdown = STOP_CHECK_RECORDS
    last = -1
    for index in range(start, len(files)):
        mapped_file = files[index]
        mm, base, position = mapped_file.mm, mapped_file.file_from_offset, 0
        if stop is not None and stop.is_set():
            raise RecoveryStoppedError(base)
        if end is not None and base >= end:
            return _Scan(end, last_record=last)
        if total_files > NORMAL_RECOVERY_FILES and (index - start) % PROGRESS_EVERY_FILES == 0:
            log.info(
                "recovery_progress",
                file=mapped_file.file_name,
                done=index - start,
                files=total_files,
            )
        while True:
            if end is not None and base + position >= end:
                return _Scan(end, last_record=last)
            check = check_message_and_return_size(mm, position, base + position, check_crc)
            if check.ok and check.size > 0:
                countdown -= 1
                if not countdown:
                    countdown = STOP_CHECK_RECORDS
                    if stop is not None and stop.is_set():
                        raise RecoveryStoppedError(base + position)
                    if pause_s:
                        time.sleep(pause_s)
                key = check.topic_queue_key
                if (
                    enters_consume_queue(check.sys_flag)
                    and table.get(key, 0) <= check.queue_offset
                    and not (deleted and deleted.skips_key(key, base + position))
                ):
                    table[key] = check.queue_offset + 1
                last = base + position
                position += check.size
                continue
            if check.ok:  # BLANK: the segment is complete
                break
            return _Scan(base + position, index, check.reason, last)
    final = files[-1]
    return _Scan(final.file_from_offset + final.file_size, last_record=last)


def _start_index(
    files: list[MappedFile], abnormal: bool, checkpoint: StoreCheckpoint | None
) -> int:
    if not abnormal:
        return max(0, len(files) - NORMAL_RECOVERY_FILES)
    if checkpoint is None:
        return 0
    index = (checkpoint.flushed_offset - files[0].file_from_offset) // files[0].file_size
    return min(max(index, 0), len(files) - 1)


def _index_of(files: list[MappedFile], offset: int) -> int:
    index = (offset - files[0].file_from_offset) // files[0].file_size
    return min(max(index, 0), len(files) - 1)


def _valid_record_after(files: list[MappedFile], index: int, offset: int, check_crc: bool) -> bool:
    """Is there a valid record after the bad one at `offset` (in its file or later files)?"""
    mapped_file = files[index]
    base = mapped_file.file_from_offset
    if (
        find_record_boundary(
            mapped_file.mm, offset - base + 1, base, mapped_file.file_size, verify_crc=check_crc
        )
        is not None
    ):
        return True
    for later in files[index + 1 :]:
        check = check_message_and_return_size(later.mm, 0, later.file_from_offset, check_crc)
        if check.ok and check.size > 0:
            return True
    return False


def _data_end(mapped_file: MappedFile, position: int) -> int:
    """End of the non-zero bytes at or after `position` (a backwards scan in 1 MiB chunks)."""
    end = mapped_file.file_size
    mm = mapped_file.mm
    while end > position:
        start = max(position, end - _CHUNK)
        stripped = len(mm[start:end].rstrip(b"\0"))
        if stripped:
            return start + stripped
        end = start
    return position


def _cut(mapped_file: MappedFile, position: int, offset: int) -> str | None:
    """Save the non-zero bytes from `position` to `<segment>.truncated-<offset>`, then zero them."""
    end = _data_end(mapped_file, position)
    if end <= position:
        return None
    side = f"{mapped_file.file_name}.truncated-{offset}"
    for attempt in itertools.count(1):
        if not os.path.exists(side):
            break  # a second cut at the same offset must not overwrite the bytes kept before
        side = f"{mapped_file.file_name}.truncated-{offset}.{attempt}"
    with open(side, "xb") as handle:
        handle.write(mapped_file.mm[position:end])
        handle.flush()
        os.fsync(handle.fileno())
    for start in range(position, end, _CHUNK):
        stop = min(end, start + _CHUNK)
        mapped_file.mm[start:stop] = bytes(stop - start)
    mapped_file.mm.flush()
    return side


def _truncate(queue: MappedFileQueue, offset: int) -> list[str]:
    sides: list[str] = []
    for mapped_file in queue.mapped_files:
        start = mapped_file.file_from_offset
        if start + mapped_file.file_size <= offset:
            continue
        position = max(0, offset - start)
        side = _cut(mapped_file, position, start + position)
        if side is not None:
            sides.append(side)
            log.warning(
                "commit_log_truncated",
                file=mapped_file.file_name,
                offset=start + position,
                kept_in=side,
            )
    queue.truncate_dirty_files(offset)
    return sides


def recover(
    queue: MappedFileQueue, config: MessageStoreConfig, stop: threading.Event | None = None
) -> RecoveryResult:
    """Find the end of the valid log, cut what follows, rebuild the topic-queue table.

    Setting `stop` during the scan raises RecoveryStoppedError before anything is changed.

    Raises CommitLogCorruptError naming file and offset when a bad record below the durable end is
    followed by valid records, unless `config.recover_truncate_corrupt` is set.
    """
    root = config.store_path_root_dir
    abnormal = abort_file_exists(root)
    files = queue.mapped_files
    if not files:
        queue.truncate_dirty_files(0)
        return RecoveryResult(0, {}, abnormal, 0)
    checkpoint = StoreCheckpoint.load(root)
    snapshot = TopicQueueTableSnapshot.load(root)
    deleted = DeletedTopics.load(root, queue.min_offset)
    fast = not abnormal and not config.recover_truncate_corrupt  # the operator asked to check
    if fast and _clean_stop(files, checkpoint, snapshot, read_flush_offset(root)):
        assert snapshot is not None
        log.info("commit_log_recovered", abnormal=False, offset=snapshot.offset, stopped="clean")
        queue.truncate_dirty_files(snapshot.offset)
        verify_from = files[max(0, len(files) - NORMAL_RECOVERY_FILES)].file_from_offset
        return RecoveryResult(
            snapshot.offset,
            deleted.filter_table(dict(snapshot.table), snapshot.offset),
            False,
            snapshot.offset,
            verify_from=verify_from,
            last_record=snapshot.last_record,
        )
    start = _start_index(files, abnormal, checkpoint)
    table: dict[str, int] = {}
    if snapshot is not None:
        start = min(start, _index_of(files, snapshot.offset))
        table = deleted.filter_table(dict(snapshot.table), snapshot.offset)
    else:
        start = 0
    scan = _scan(files, start, table, config.check_crc_on_recover, stop, deleted=deleted)
    if snapshot is not None and snapshot.offset > scan.process_offset:
        log.warning(
            "topic_queue_table_snapshot_ahead", snapshot=snapshot.offset, end=scan.process_offset
        )
        start, table = 0, {}
        scan = _scan(files, 0, table, config.check_crc_on_recover, stop, deleted=deleted)
        # Replaced at once: left in place, it would look valid again once the log grew past its
        # offset, and a crash then would bring back queue offsets of the records cut away.
        TopicQueueTableSnapshot(scan.process_offset, dict(table)).write(root)
    if scan.bad_index is not None:
        _check_tail(files, scan, config, checkpoint, root)
    log.info(
        "commit_log_recovered",
        abnormal=abnormal,
        offset=scan.process_offset,
        scanned_from=files[start].file_name,
        stopped=scan.reason or "end",
    )
    sides = _truncate(queue, scan.process_offset)
    return RecoveryResult(
        scan.process_offset,
        table,
        abnormal,
        files[start].file_from_offset if files else 0,
        sides,
        last_record=scan.last_record,
    )


def _clean_stop(
    files: list[MappedFile],
    checkpoint: StoreCheckpoint | None,
    snapshot: TopicQueueTableSnapshot | None,
    flush_offset: tuple[int, int, int] | None,
) -> bool:
    """The store was closed cleanly and its metadata agree, so the log ends where they say and
    nothing needs scanning: a clean stop flushes everything, then writes the checkpoint and the
    topic-queue table snapshot at the flushed offset, syncs `flushoffset` and only then removes
    the abort file. What a scan would find is already known, whatever the store's size.

    The last record is checked (the snapshot says where it starts), so damage to the tail after
    the stop is cut by the scan as before; anything else that does not fit (a metadata file
    missing or disagreeing, bytes after the end) sends recovery down the scanning path too."""
    if checkpoint is None or snapshot is None or flush_offset is None:
        return False
    end = snapshot.offset
    if not checkpoint.flushed_offset == flush_offset[0] == end:
        return False
    size = files[0].file_size
    first, last = files[0].file_from_offset, files[-1].file_from_offset + size
    if not first <= end <= last:
        return False
    if end < last:
        mapped_file = files[(end - first) // size]
        position = end - mapped_file.file_from_offset
        # Nothing was written after the end: the next bytes are zeros, as in a new segment.
        if any(mapped_file.mm[position : min(size, position + _TAIL_PROBE)]):
            return False
    return _last_record_ends_at(files, snapshot.last_record, end)


def _last_record_ends_at(files: list[MappedFile], record: int, end: int) -> bool:
    """The record the snapshot names as the last one is whole and ends the log at `end`, or
    is followed by its segment's BLANK when `end` is the segment's end (damage to the tail
    after the stop is then cut by the scan, as a torn tail would be)."""
    size = files[0].file_size
    first = files[0].file_from_offset
    if not first <= record < end:
        return False
    mapped_file = files[(record - first) // size]
    position = record - mapped_file.file_from_offset
    check = check_message_and_return_size(mapped_file.mm, position, record, True)
    if not (check.ok and check.size > 0):
        return False
    after = record + check.size
    if after == end:
        return True
    blank = check_message_and_return_size(mapped_file.mm, position + check.size, after, True)
    return blank.ok and blank.size == 0 and end == mapped_file.file_from_offset + size


def verify_tail(
    files: list[MappedFile],
    end: int,
    config: MessageStoreConfig,
    stop: threading.Event,
    pause_s: float,
) -> tuple[str, int, str] | None:
    """Check the records of `files` up to `end`, as a scan at startup would have (worker
    thread, pausing now and then); (file, offset, reason) of the first bad one, or None.

    Raises RecoveryStoppedError when `stop` is set."""
    scan = _scan(files, 0, {}, config.check_crc_on_recover, stop, end=end, pause_s=pause_s)
    if scan.bad_index is None or scan.process_offset >= end:
        return None
    return files[scan.bad_index].file_name, scan.process_offset, scan.reason


def _check_tail(
    files: list[MappedFile],
    scan: _Scan,
    config: MessageStoreConfig,
    checkpoint: StoreCheckpoint | None,
    root: str,
) -> None:
    """A bad record below the durable end with valid records after it is corruption, not a tail."""
    assert scan.bad_index is not None
    flush_offset = read_flush_offset(root)
    durable = max(
        checkpoint.flushed_offset if checkpoint else 0, flush_offset[0] if flush_offset else 0
    )
    if scan.process_offset >= durable:
        return
    if not _valid_record_after(
        files, scan.bad_index, scan.process_offset, config.check_crc_on_recover
    ):
        return
    file_name = files[scan.bad_index].file_name
    if not config.recover_truncate_corrupt:
        raise CommitLogCorruptError(file_name, scan.process_offset, scan.reason)
    log.error(
        "commit_log_corrupt_truncated",
        file=file_name,
        offset=scan.process_offset,
        reason=scan.reason,
    )
