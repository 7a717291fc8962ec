"""`IndexService`: the index files of a store, built behind the consume-queue dispatcher.

Follows the dispatched offset (`ConsumeService.dispatched_offset`) with its own reader of the
commit log, a batch of records at a time in a worker thread (`store.index.runner`). Records of
every type but transaction ROLLBACK are indexed, as 4.9's `IndexService.buildIndex`: the UNIQ_KEY
and each space-separated KEYS entry, as `topic#key`. A batch is one run of records, the fields
the index needs read from the layout (`store.index.locate`), its keys found, hashed and put in
array operations (`store.index.batch`); without numpy, or for a run with a record that does not
add up, record by record (`index_keys`, `IndexFile.put_key`), with the same bytes. A file that
is full is followed by a new one named by the wall clock (`yyyyMMddHHmmssSSS`, moved on a
millisecond when that name is taken).

Crash safety. Every second (and at close) the files written since are msync'ed and then
`config/indexCheckpoint` records, atomically, the commit-log offset indexed up to, the last
file's name and its item count: everything the checkpoint names is on disk. At open, files
newer than the checkpoint's are deleted and, after a crash or when its header says otherwise,
the checkpoint's file is cut back to the saved count (its slots rebuilt from the items kept,
so a slot a crash wrote for a later item points nowhere); then items at or past the recovered
end of the commit log are cut too, and indexing resumes at the checkpoint's offset. So the
index is never ahead of the commit log and misses nothing behind it. 4.9 instead deletes, after
a crash, every file whose end time is past the checkpoint's index timestamp (set only when a
file fills) and does not rebuild them. With no checkpoint (a first start, another broker's
files) or files of other `max_hash_slot_num` / `max_index_num`, it is rebuilt from the log.

Retention: `delete_below` drops the files whose last item points below the log's first offset
(never the newest), as 4.9's `deleteExpiredFile`. One lock serializes builds, queries, deletion.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Final

import structlog
import trio

from store.checkpoint import atomic_write
from store.decode import CommitLogRecord
from store.index.index_file import (
    INDEX_NAME_LENGTH,
    IndexFile,
    index_file_name,
    index_keys,
    is_index_name,
)
from store.mapped_file import fsync_dir, make_dirs
from store.message import TRANSACTION_ROLLBACK_TYPE, get_transaction_value
from store.reader import CommitLogReader, SegmentGoneError

log = structlog.get_logger()
INDEX_DIR: Final = "index"
CHECKPOINT_FILE: Final = os.path.join("config", "indexCheckpoint")
#: records indexed per worker-thread call
BUILD_BATCH: Final = 4096
#: shorter runs are indexed key by key: numpy's per-call costs outweigh it there, and a broker
#: that only ever sees a few messages at a time never loads numpy
MIN_VECTORISED_RUN: Final = 16


def _vectorised_modules() -> tuple[ModuleType, ModuleType] | None:
    """`store.index.batch` and `store.index.locate`, imported on first use; None without numpy.
    A failed import (numpy missing, or a first import while descriptors run out) is tried again
    on the next run; anything worse is the runner's `index_build_fault`."""
    try:
        return importlib.import_module("store.index.batch"), importlib.import_module(
            "store.index.locate"
        )
    except ImportError:
        return None


#: 4.9's `maxMsgsNumBatch`: the most offsets one query returns
MAX_MSGS_NUM_BATCH: Final = 64


@dataclass(frozen=True, slots=True)
class QueryOffsetResult:
    """Offsets of a key's items (newest first), and where the index stood."""

    offsets: list[int]
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


class IndexService:
    """Open with `IndexService.open`; `run` builds, `query_offsets` reads, `close` at the end."""

    def __init__(self, root: str, hash_slot_num: int, index_num: int, indexed: int) -> None:
        self.root = root
        self.dir = os.path.join(root, INDEX_DIR)
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.files: list[IndexFile] = []
        #: everything below this commit-log offset is indexed
        self.indexed_offset = indexed
        self.reader = CommitLogReader(root, lambda: self._end)
        self._end = indexed
        self._lock = threading.Lock()
        #: runs are indexed in array operations (`store.index.batch`) when numpy is there
        self.vectorised = True
        #: ... and when they hold at least this many records
        self.min_vectorised_run = MIN_VECTORISED_RUN
        self._written: set[IndexFile] = set()
        self._saved_offset = -1
        self._release_below = 0
        self._wakeup = trio.Event()
        #: files were created or deleted since the last save
        self._names_changed = True

    # --- open and repair --------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        root: str,
        hash_slot_num: int,
        index_num: int,
        *,
        log_min: int,
        log_max: int,
        abnormal: bool,
    ) -> IndexService:
        """Load the files, cut them to the checkpoint and to `log_max` (module docstring)."""
        service = cls(root, hash_slot_num, index_num, log_min)
        make_dirs(service.dir)
        names = sorted(n for n in os.listdir(service.dir) if is_index_name(n))
        saved = service._read_checkpoint()
        if saved is None:
            service._drop_all(names)
            if names:
                log.warning("index_rebuilt", reason="no index checkpoint", files=len(names))
        else:
            offset, last_name, count = saved
            for name in names:
                path = os.path.join(service.dir, name)
                if name > last_name:
                    os.unlink(path)
                    log.info("index_file_dropped", file=name, reason="newer than the checkpoint")
                    continue
                try:
                    service.files.append(IndexFile(path, hash_slot_num, index_num))
                except ValueError as exc:  # other limits than this configuration's
                    log.warning("index_rebuilt", reason=str(exc), files=len(names))
                    service._drop_all(names)
                    saved = None
                    break
        if saved is not None:
            offset, last_name, count = saved
            last = service.files[-1] if service.files else None
            if last is not None and last.name == last_name and (abnormal or last.count != count):
                last.truncate(count)
                service._written.add(last)
            service.indexed_offset = offset
        service._cut_to(log_max)
        service.indexed_offset = min(max(service.indexed_offset, log_min), log_max)
        service._end = service.indexed_offset
        service.save(force=True)
        return service

    def _drop_all(self, names: list[str]) -> None:
        """Every file goes; indexing starts again from the log's first record."""
        for index_file in self.files:
            index_file.close()
        self.files.clear()
        for name in names:
            path = os.path.join(self.dir, name)
            if os.path.exists(path):
                os.unlink(path)

    def _cut_to(self, log_max: int) -> None:
        """Items pointing at or past `log_max` go: the commit log recovered less than that."""
        while self.files and self.files[-1].end_offset >= log_max:
            last = self.files[-1]
            keep = last.first_number_at_or_past(log_max) if last.count > 1 else 1
            if keep <= 1:  # nothing left, or an empty file that inherited a later offset
                self.files.pop()
                self._written.discard(last)
                last.destroy()
                log.info("index_file_dropped", file=last.name, reason="past the commit log")
                continue
            last.truncate(keep)
            self._written.add(last)
            log.info("index_file_cut", file=last.name, items=last.items, log_end=log_max)
            break

    def _checkpoint_path(self) -> str:
        return os.path.join(self.root, CHECKPOINT_FILE)

    def _read_checkpoint(self) -> tuple[int, str, int] | None:
        try:
            with open(self._checkpoint_path(), encoding="ascii") as handle:
                offset, name, count = handle.read().split()
            return int(offset), name, int(count)
        except (OSError, ValueError):
            return None

    # --- building -----------------------------------------------------------------------------

    def wakeup(self, *_: object) -> None:
        """A listener of the dispatcher: the dispatched offset moved."""
        self._wakeup.set()

    async def wait_dispatched(self, timeout_s: float) -> None:
        """Until the next `wakeup` (or one since the last wait), at most `timeout_s`."""
        with trio.move_on_after(timeout_s):
            await self._wakeup.wait()
        self._wakeup = trio.Event()

    @property
    def release_pending(self) -> bool:
        """Retention waits for segments to be unmapped (`release_below`)."""
        return self._release_below > 0

    def release_below(self, offset: int) -> None:
        """Retention is about to delete the segments ending at or below `offset`: their
        mappings go now unless a batch is running, else when it ends."""
        if self._lock.acquire(blocking=False):
            try:
                self.reader.release_below(offset)
            finally:
                self._lock.release()
        else:
            self._release_below = max(self._release_below, offset)

    def build_batch(self, end: int) -> bool:
        """Index up to `BUILD_BATCH` records below `end` (worker thread); True if it moved.
        Segments wholly below the indexed offset are unmapped after each batch: they are not
        read again, and retention must not wait for them."""
        with self._lock:
            start = self.indexed_offset
            if start < end:
                self._end = end
                self.reader.refresh()
                if start < self.reader.min_offset:
                    self.indexed_offset = start = min(self.reader.min_offset, end)
                try:
                    self._index_records(start, end)
                except SegmentGoneError:
                    self.reader.refresh()
                    self.indexed_offset = max(self.indexed_offset, min(self.reader.min_offset, end))
            size = self.reader.segment_size
            below = max(self._release_below, self.indexed_offset - self.indexed_offset % size)
            self.reader.release_below(below)
            self._release_below = 0
            return self.indexed_offset > start

    def _index_records(self, start: int, end: int) -> None:
        if self.vectorised and self._index_located(start, end):
            return
        runs = self.reader.iter_columns(
            start, end, include_body=False, verify_crc=False, run=BUILD_BATCH
        )
        for columns in runs:
            for rec in columns.records():
                self._index_record(rec)
            last = len(columns) - 1
            self.indexed_offset = int(columns.physical_offset[last] + columns.total_size[last])
            return  # one run a batch: the reader stops at BUILD_BATCH records
        self.indexed_offset = end  # the reader went all the way, across segment-end blanks

    def _index_located(self, start: int, end: int) -> bool:
        """A run indexed in array operations from the fields the index reads only; False when
        it must be decoded whole (a record that does not add up; no numpy)."""
        for found in self.reader.iter_walks(start, end, run=BUILD_BATCH):
            if len(found.positions) < self.min_vectorised_run:
                return False
            modules = _vectorised_modules()
            if modules is None:
                return False
            batch_api, locate_api = modules
            fields = locate_api.locate_run(found)
            if fields is None:
                return False
            keys = batch_api.run_keys(fields)
            current = self._last_file() if len(keys) else None
            if current is not None:
                keys = keys.from_offset(current.end_offset)  # indexed before: not again (4.9)
            while current is not None and len(keys):
                put = batch_api.put_keys(current, keys)
                self._written.add(current)
                keys = keys.skip(put)
                if len(keys):
                    current = self._roll(current)
            self.indexed_offset = found.base + found.positions[-1] + found.sizes[-1]
            return True
        self.indexed_offset = end  # the reader went all the way, across segment-end blanks
        return True

    def _index_record(self, rec: CommitLogRecord) -> None:
        """The keys of one record, put one by one (without numpy)."""
        if get_transaction_value(rec.sys_flag) == TRANSACTION_ROLLBACK_TYPE:
            return
        keys = index_keys(rec.properties)
        if not keys:
            return
        current = self._last_file()
        if rec.physical_offset < current.end_offset:
            return  # indexed before (4.9's guard)
        for key in keys:
            full = f"{rec.topic}#{key}"
            if not current.put_key(full, rec.physical_offset, rec.store_timestamp):
                current = self._roll(current)
                current.put_key(full, rec.physical_offset, rec.store_timestamp)
            self._written.add(current)

    def _last_file(self) -> IndexFile:
        if self.files and not self.files[-1].is_full:
            return self.files[-1]
        return self._roll(self.files[-1] if self.files else None)

    def _roll(self, full: IndexFile | None) -> IndexFile:
        name = index_file_name(time.time_ns() // 1_000_000)
        if self.files and name <= self.files[-1].name:
            name = f"{int(self.files[-1].name) + 1:0{INDEX_NAME_LENGTH}d}"
        created = IndexFile(
            os.path.join(self.dir, name),
            self.hash_slot_num,
            self.index_num,
            begin_offset=full.end_offset if full is not None else 0,
            begin_timestamp=full.end_timestamp if full is not None else 0,
        )
        self.files.append(created)
        self._written.add(created)
        self._names_changed = True
        log.info("index_file_created", file=name)
        return created

    # --- flush and checkpoint -----------------------------------------------------------------

    def save(self, *, force: bool = False) -> None:
        """msync what was written since the last save, then the checkpoint (worker thread)."""
        with self._lock:
            if not force and not self._written and self.indexed_offset == self._saved_offset:
                return
            for written in sorted(self._written, key=lambda f: f.name):
                written.flush()
            if self._names_changed:
                fsync_dir(self.dir)  # the files the checkpoint names are there after a power cut
                self._names_changed = False
            self._written.clear()
            last = self.files[-1] if self.files else None
            name, count = (last.name, last.count) if last is not None else ("0", 1)
            text = f"{self.indexed_offset} {name} {count}\n"
            atomic_write(self._checkpoint_path(), text.encode("ascii"))
            self._saved_offset = self.indexed_offset

    # --- queries and retention ----------------------------------------------------------------

    def query_offsets(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> QueryOffsetResult:
        """Offsets of `topic#key` stored within [begin, end], newest file first (4.9's
        `queryOffset`); a hash match only (worker thread)."""
        max_num = min(max_num, MAX_MSGS_NUM_BATCH)
        found: list[int] = []
        last_ts = last_offset = 0
        with self._lock:
            for position in range(len(self.files) - 1, -1, -1):
                index_file = self.files[position]
                if position == len(self.files) - 1:
                    last_ts, last_offset = index_file.end_timestamp, index_file.end_offset
                if index_file.time_matched(begin, end):
                    index_file.select_offsets(found, f"{topic}#{key}", max_num, begin, end)
                if index_file.begin_timestamp < begin or len(found) >= max_num:
                    break
        return QueryOffsetResult(found, last_ts, last_offset)

    def delete_below(self, offset: int) -> int:
        """Delete the files (never the newest) whose items all point below `offset`; how many
        went (worker thread)."""
        deleted = 0
        with self._lock:
            while len(self.files) > 1 and self.files[0].end_offset < offset:
                gone = self.files.pop(0)
                self._written.discard(gone)
                gone.destroy()
                deleted += 1
                log.info("index_file_deleted", file=gone.name, end_offset=gone.end_offset)
        return deleted

    def close(self) -> None:
        with self._lock:
            for index_file in self.files:
                index_file.close()
            self.files.clear()
            self.reader.close()
