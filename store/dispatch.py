"""`ConsumeQueueTable` and `ReputMessageService`: building the consume queues from the commit log.

Owns the table of `ConsumeQueue`s of a store directory and the dispatch of commit-log records
into them, never past the DURABLE offset (what `flushoffset` says was fsynced), so a consumer can
never read a message that a crash could take back. Transaction PREPARED and ROLLBACK records are
not dispatched. On open the queues are repaired against the recovered commit log: units at or
past its end are dropped, and dispatch resumes from the queues' own end (the lowest end over all
queues and the saved dispatch offset), so nothing is skipped and re-dispatch is idempotent.
The fully dispatched offset is kept in `consumequeue/dispatched.offset`. Mirrors
ReputMessageService and DefaultMessageStore.recoverTopicQueueTable (4.9).
"""

from __future__ import annotations

import collections
import contextlib
import os
from collections.abc import Callable, Iterable
from typing import Final

import structlog
import trio

from store.consume_queue import DEFAULT_UNITS_PER_FILE, ConsumeQueue
from store.decode import CommitLogRecord
from store.deleted_topics import DeletedTopics
from store.encode import EncodedBatch
from store.mapped_file import fsync_dir, make_dirs
from store.message import enters_consume_queue, tags_code_of
from store.open_files import DEFAULT_CAPACITY, OpenFiles
from store.reader import CommitLogReader, SegmentGoneError

log = structlog.get_logger()

#: consumequeue/dispatched.offset: the fully dispatched offset, int64 text, written after the
#: queues' fdatasync. Beside the topic directories, so removing consumequeue/ rebuilds everything;
#: the dot keeps it apart from any topic name (topics are `[%|a-zA-Z0-9_-]+`).
DISPATCHED_FILE: Final = "dispatched.offset"
#: its earlier name, which a topic called "dispatched" collided with
_LEGACY_FILE: Final = "dispatched"
SAVE_INTERVAL_S: Final = 1.0  # queues fdatasync'ed and the dispatch offset saved this often
RETRY_INTERVAL_S: Final = 0.5  # wait after a failed consume-queue write (a full disk)
DISPATCH_BATCH: Final = 4096  # records per pass, so other tasks run between passes

Listener = Callable[[str, int, int], None]  # topic, queue id, new max logical offset


class ConsumeQueueTable:
    """Every `ConsumeQueue` of a store directory, created on first use."""

    def __init__(
        self,
        root: str,
        units_per_file: int = DEFAULT_UNITS_PER_FILE,
        max_open_files: int = DEFAULT_CAPACITY,
        deleted: DeletedTopics | None = None,
    ) -> None:
        self.root = root
        #: deleted topics: their records below the delete are never dispatched again
        self.deleted = deleted if deleted is not None else DeletedTopics(root)
        self.units_per_file = units_per_file
        #: every queue's descriptors: at most `max_open_files` open at once
        self.files = OpenFiles(max_open_files)
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._load()

    def _load(self) -> None:
        base = os.path.join(self.root, "consumequeue")
        if not os.path.isdir(base):
            return
        for topic in sorted(os.listdir(base)):
            topic_dir = os.path.join(base, topic)
            if not os.path.isdir(topic_dir):
                continue
            for qid in os.listdir(topic_dir):
                if qid.isdigit():
                    self._drop_if_deleted(self.find(topic, int(qid)))

    def _drop_if_deleted(self, queue: ConsumeQueue) -> None:
        """A queue of a deleted topic still indexing records from before the delete: a crash
        came in the middle of the delete, which is finished now."""
        if queue.topic not in self.deleted.barriers:
            return  # the common case: no pread for the queues of topics never deleted
        first = queue.get(queue.min_logic_offset)
        if first is not None and self.deleted.skips(queue.topic, first.physical_offset):
            log.warning(
                "consume_queue_of_deleted_topic_removed", topic=queue.topic, queue_id=queue.queue_id
            )
            queue.destroy()
            del self.queues[(queue.topic, queue.queue_id)]

    def remove_topic(self, topic: str) -> list[int]:
        """Destroy every queue of `topic` (its files and directories); the queue ids."""
        ids = sorted(q for t, q in self.queues if t == topic)
        for queue_id in ids:
            self.queues.pop((topic, queue_id)).destroy()
        with contextlib.suppress(OSError):  # absent, or holding what is not a queue
            os.rmdir(os.path.join(self.root, "consumequeue", topic))
        return ids

    def find(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        queue = self.queues.get(key)
        if queue is None:
            queue = ConsumeQueue(self.root, topic, queue_id, self.units_per_file, self.files)
            self.queues[key] = queue
        return queue

    def existing(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def close(self) -> None:
        self.files.close_all()

    def flush(self) -> None:
        """fdatasync the written files, then the new directory entries (worker thread)."""
        self.files.sync_all()
        for queue in list(self.queues.values()):  # a worker thread: dispatch may add queues
            queue.sync_dirs()

    def topic_queue_table(self) -> dict[str, int]:
        """`topic-queueId` -> next logical offset, as the commit log's table keys it."""
        return {f"{t}-{q}": cq.max_logic_offset for (t, q), cq in self.queues.items()}

    # --- recovery -----------------------------------------------------------------------------

    def _dispatched_path(self) -> str:
        return os.path.join(self.root, "consumequeue", DISPATCHED_FILE)

    def _legacy_dispatched_path(self) -> str:
        return os.path.join(self.root, "consumequeue", _LEGACY_FILE)

    def saved_dispatch_offset(self) -> int | None:
        for path in (self._dispatched_path(), self._legacy_dispatched_path()):
            if not os.path.isfile(path):
                continue  # the legacy name may be a topic's directory
            try:
                with open(path, encoding="ascii") as handle:
                    return int(handle.read().strip() or "0")
            except (FileNotFoundError, ValueError):
                return None
        return None

    def save_dispatch_offset(self, offset: int) -> None:
        """Flush the queues, then record `offset` (temp + fsync + rename + fsync of the
        directory) as fully dispatched."""
        self.flush()
        path = self._dispatched_path()
        make_dirs(os.path.dirname(path))
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="ascii") as handle:
            handle.write(str(offset))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        legacy = self._legacy_dispatched_path()
        if os.path.isfile(legacy):
            os.remove(legacy)  # the new file is in place: the old one must not be read again
        fsync_dir(os.path.dirname(path))

    def repair(self, commit_log_min: int, commit_log_max: int) -> int:
        """Drop units past `commit_log_max`; return the offset dispatch must resume from."""
        for queue in self.queues.values():
            queue.truncate_dirty_logic_files(commit_log_max)
        ends = [cq.max_physical_offset for cq in self.queues.values()]
        saved = self.saved_dispatch_offset()
        resume = min([*ends, saved if saved is not None else commit_log_min], default=0)
        return min(max(resume, commit_log_min), commit_log_max)

    # --- dispatch -----------------------------------------------------------------------------

    def dispatch(self, records: Iterable[CommitLogRecord], listener: Listener | None) -> int:
        """Append the records' units, a run per queue (one write per queue and file); returns
        the end offset of the last record seen (or -1)."""
        end = -1
        runs: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
        skips = self.deleted.skips if self.deleted.barriers else None
        for rec in records:
            end = rec.physical_offset + rec.total_size
            if enters_consume_queue(rec.sys_flag) and not (
                skips and skips(rec.topic, rec.physical_offset)
            ):
                unit = (rec.queue_offset, rec.physical_offset, rec.total_size)
                runs.setdefault((rec.topic, rec.queue_id), []).append(
                    (*unit, tags_code_of(rec.properties))
                )
        for (topic, queue_id), units in runs.items():
            queue = self.find(topic, queue_id)
            if queue.append_run(units) and listener is not None:
                listener(topic, queue_id, queue.max_logic_offset)
        return end


class ReputMessageService:
    """Follows the readable end of the commit log (`reader.durable_offset()`) into the consume
    queues; `wakeup()` when it moves.

    Records written before this process's first append are read back from the commit log (the
    catch-up at open). Every later one is handed over by the writer (`note_appended`) with what
    its unit needs, and waits in `_pending` until the readable end passes it: the same units,
    without decoding records the writer has just encoded.
    """

    def __init__(self, table: ConsumeQueueTable, reader: CommitLogReader, reput_from: int) -> None:
        self.table = table
        self.reader = reader
        self.reput_from_offset = reput_from
        self.listeners: list[Listener] = []
        self._wakeup = trio.Event()
        self._dispatched_since_save = False
        #: (physical offset, size, topic, queue id, queue offset, tags code, enters the queue)
        self._pending: collections.deque[tuple[int, int, str, int, int, int, bool]] = (
            collections.deque()
        )
        #: where the first noted append began: below it, records come from the commit log
        self._noted_from: int | None = None

    def wakeup(self) -> None:
        self._wakeup.set()

    def note_appended(self, batch: EncodedBatch, wrote_offset: int, logics_offset: int) -> None:
        """The writer stored `batch` at `wrote_offset`, its first queue offset `logics_offset`."""
        if self._noted_from is None:
            self._noted_from = wrote_offset
        records = batch.records
        last = len(records) - 1
        enters = batch.enters_consume_queue
        if not last:  # one record: the whole batch
            self._pending.append(
                (
                    wrote_offset,
                    len(batch.data),
                    batch.topic,
                    batch.queue_id,
                    logics_offset,
                    batch.tags_codes[0],
                    enters,
                )
            )
            return
        for index, (start, _) in enumerate(records):
            end = records[index + 1][0] if index < last else len(batch.data)
            self._pending.append(
                (
                    wrote_offset + start,
                    end - start,
                    batch.topic,
                    batch.queue_id,
                    logics_offset + index,
                    batch.tags_codes[index],
                    enters,
                )
            )

    def dispatch_once(self) -> bool:
        """One bounded pass up to the readable end; True if it advanced."""
        noted = self._noted_from
        if noted is not None and self.reput_from_offset >= noted:
            return self._dispatch_pending()
        return self._dispatch_from_log(noted)

    def _dispatch_pending(self) -> bool:
        """Write the units of the pending records the readable end has passed: one pwrite per
        queue and file for a pass. The records leave `_pending` only once written, so a failed
        write is simply done again (appends skip units already there)."""
        limit = self.reader.durable_offset()
        pending = self._pending
        runs: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
        count = 0
        deleted = self.table.deleted
        skips = deleted.skips if deleted.barriers else None  # no lookup while nothing is deleted
        for physical, size, topic, queue_id, queue_offset, code, enters in pending:
            if count == DISPATCH_BATCH or physical + size > limit:
                break
            count += 1
            if enters and not (skips and skips(topic, physical)):
                runs.setdefault((topic, queue_id), []).append((queue_offset, physical, size, code))
        if not count:
            return False
        find = self.table.find
        changed = []
        for (topic, queue_id), units in runs.items():
            queue = find(topic, queue_id)
            if queue.append_run(units):
                changed.append((topic, queue_id, queue.max_logic_offset))
        for _ in range(count - 1):
            pending.popleft()
        physical, size = pending.popleft()[:2]
        self.reput_from_offset = physical + size
        self._dispatched_since_save = True
        for topic, queue_id, max_offset in changed:
            self._notify(topic, queue_id, max_offset)
        return True

    def _dispatch_from_log(self, stop: int | None) -> bool:
        records = self.reader.iter_records(
            self.reput_from_offset, end=stop, include_body=False, verify_crc=False
        )
        batch = (rec for _, rec in zip(range(DISPATCH_BATCH), records, strict=False))
        try:
            end = self.table.dispatch(batch, self._notify)
        except SegmentGoneError:
            # The log starts past us: a slave's first segment is its master's last one (4.9's
            # reput moves up to the log's start likewise). Nothing below it can be dispatched.
            start = self.reader.min_offset
            if start <= self.reput_from_offset:
                raise
            log.warning("dispatch_moved_to_log_start", start=start, was=self.reput_from_offset)
            self.reput_from_offset = start
            return True
        if end <= self.reput_from_offset:
            # no record, but a segment-end blank may still move us into the next file
            durable = self.reader.durable_offset()
            if stop is not None:
                durable = min(durable, stop)
            if durable > self.reput_from_offset and end == -1:
                self.reput_from_offset = self._skip_blank(durable)
            return False
        self.reput_from_offset = end
        self._dispatched_since_save = True
        return True

    def _skip_blank(self, durable: int) -> int:
        size = self.reader.segment_size
        next_file = self.reput_from_offset - self.reput_from_offset % size + size
        return min(next_file, durable)

    def _notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        for listener in self.listeners:
            listener(topic, queue_id, max_offset)

    def save(self) -> None:
        if self._dispatched_since_save:
            self.table.save_dispatch_offset(self.reput_from_offset)
            self._dispatched_since_save = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Dispatch when woken and at least every 100 ms; save the dispatch offset each second.

        A consume-queue write that fails (a full disk) stops dispatch, not the store: the
        records stay in the commit log and the next round dispatches them again (appends are
        idempotent), with one event per failing spell.
        """
        task_status.started()
        next_save = trio.current_time() + SAVE_INTERVAL_S
        failing = False
        try:
            while True:
                try:
                    while self.dispatch_once():
                        await trio.lowlevel.checkpoint()
                    if trio.current_time() >= next_save:
                        next_save = trio.current_time() + SAVE_INTERVAL_S
                        await trio.to_thread.run_sync(self.save)
                except OSError as exc:
                    if not failing:
                        log.error("consume_queue_write_failed", error=str(exc))
                    failing = True
                    await trio.sleep(RETRY_INTERVAL_S)
                    continue
                if failing:
                    log.info("consume_queue_write_recovered", offset=self.reput_from_offset)
                    failing = False
                with trio.move_on_after(0.1):
                    await self._wakeup.wait()
                self._wakeup = trio.Event()
        finally:
            with trio.CancelScope(shield=True):
                try:
                    # Everything readable goes into the queues now: what is left would be
                    # read back from the commit log at the next start, slowing it down.
                    while self.dispatch_once():
                        pass
                    await trio.to_thread.run_sync(self.save)
                except OSError as exc:
                    # the saved offset stays behind: the next start dispatches again from it
                    log.error("consume_queue_close_failed", error=str(exc))
