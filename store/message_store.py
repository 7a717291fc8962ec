"""`DefaultMessageStore`: the store's lifecycle and public face (RocketMQ `DefaultMessageStore`).

Owns the lifecycle (lock, recovery, abort file, services, orderly shutdown), the wiring of the
single writer (`store.writer`, where a put is checked, encoded and appended) to the flush
services and the consume side, and what the broker reads and calls. Every put outcome is a
`PutMessageStatus`; nothing here raises for a put.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import structlog
import trio

from store import status
from store.allocate import AllocateMappedFileService, CreateFile, TransientStorePool
from store.checkpoint import FlushOffsetFile, acquire_lock, create_abort_file, release_lock
from store.cleanup import CleanCommitLogService, CleanConsumeQueueService, clean_files_periodically
from store.commit_log import CommitLog
from store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from store.consume_queue import CQ_STORE_UNIT_SIZE
from store.consume_service import ConsumeService
from store.flush import (
    CommitRealTimeService,
    Flusher,
    FlushRealTimeService,
    GroupCommitService,
    thread_flusher,
)
from store.index import open_index
from store.mapped_file import create_segment_file, make_dirs
from store.mapped_file_queue import MappedFileQueue
from store.message import MessageExtBrokerInner, PutMessageResult
from store.put_queue import BurstCallback
from store.recovery import recover
from store.replica import GroupTransferService, ReplicaLog
from store.status import RunningFlags
from store.store_tasks import (
    DiskCheck,
    SlowPutHook,
    StoreStats,
    checkpoint_loop,
    run_stoppable,
    shutdown_files,
    verify_tail_loop,
)
from store.writer import CommitLogWriter

log = structlog.get_logger()

SHUTDOWN_TIMEOUT_S = 30.0


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class DefaultMessageStore:
    """Open with `async with DefaultMessageStore.open(config) as store:`; see docs/design.md."""

    def __init__(
        self,
        config: MessageStoreConfig,
        *,
        flusher: Flusher = thread_flusher,
        create_file: CreateFile = create_segment_file,
        now_ms: Callable[[], int] = wall_clock_ms,
        on_slow_put: SlowPutHook | None = None,
    ) -> None:
        self.config = config
        self.now_ms = now_ms
        self.running_flags = RunningFlags()
        self.stats = StoreStats(config.slow_put_threshold_ms, on_slow_put)
        self.disk = DiskCheck(config, self.running_flags)
        self.mapped_file_queue = queue = MappedFileQueue(
            config.store_path_commit_log,
            config.mapped_file_size_commit_log,
            write_buffers=config.transient_store_pool_effective,
        )
        self.pool = (
            TransientStorePool(config.transient_store_pool_size, config.mapped_file_size_commit_log)
            if config.transient_store_pool_effective
            else None
        )
        self.allocator = AllocateMappedFileService(
            config, self.running_flags, create_file, self.pool
        )
        self.commit_log = CommitLog(queue, self.allocator)
        self.sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self.group_commit = GroupCommitService(
            queue, flusher, self._on_flushed, self._on_flush_failed
        )
        self.flush_real_time = FlushRealTimeService(
            config, queue, flusher, self._on_flushed, self._on_flush_failed
        )
        self.commit_real_time = (
            CommitRealTimeService(config, queue, self.flush_real_time, self.pool.return_buffer)
            if self.pool is not None
            else None
        )
        #: the flush service that runs (the other one is never started)
        self.flush: GroupCommitService | FlushRealTimeService = (
            self.group_commit if self.sync_flush else self.flush_real_time
        )
        self.flush_offset_file: FlushOffsetFile | None = None
        self.consume: ConsumeService | None = None  # consume queues, set by recovery
        self.clean_commit_log = CleanCommitLogService(
            config,
            queue,
            deletable_end=self._deletable_end,
            on_disk_ratio=self.disk.apply,
            release_below=self._release_segments_below,
            wall_ms=now_ms,
        )
        self.clean_consume_queue: CleanConsumeQueueService | None = None
        #: (from, to) of a clean stop's log, checked in the background once the store runs
        self._verify_tail: tuple[int, int] | None = None
        #: replication's reads (master) and appends (slave) of the commit log
        self.replica = ReplicaLog(queue, self.allocator, self._after_appends)
        self.slave = config.broker_role is BrokerRole.SLAVE
        #: SYNC_MASTER's wait for a slave; None in the other roles
        self.transfer: GroupTransferService | None = None
        if config.broker_role is BrokerRole.SYNC_MASTER:
            self.transfer = GroupTransferService(config.ha_slave_fallbehind_max)
            self.group_commit.forward = self.transfer.put_request
        self.writer = CommitLogWriter(
            config,
            self.commit_log,
            self.running_flags,
            now_ms=now_ms,
            sync_flush=self.sync_flush,
            to_group_commit=self.group_commit.put_request,
            to_transfer=None if self.transfer is None else self.transfer.put_request,
            after_appends=self._after_appends,
            finish=self.stats.finish,
        )

    # --- lifecycle -------------------------------------------------------------------------

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        config: MessageStoreConfig,
        *,
        flusher: Flusher = thread_flusher,
        create_file: CreateFile = create_segment_file,
        now_ms: Callable[[], int] = wall_clock_ms,
        on_slow_put: SlowPutHook | None = None,
    ) -> AsyncIterator[DefaultMessageStore]:
        """Lock the directory, recover, start the services; on exit drain, flush and close.

        Raises StoreLockedError when another store holds the directory, StoreLoadError for a bad
        segment and CommitLogCorruptError for corruption before the durable end.
        """
        root = config.store_path_root_dir
        make_dirs(config.store_path_commit_log)
        make_dirs(os.path.join(root, "config"))
        lock_fd = acquire_lock(root)
        store = cls(
            config, flusher=flusher, create_file=create_file, now_ms=now_ms, on_slow_put=on_slow_put
        )
        try:
            # In a worker thread; a cancel (a signal at startup) stops its read-only scan
            # instead of waiting for the whole log, and then raises Cancelled.
            await run_stoppable(store._load_and_recover, stopped_event="recovery_stopped")
            async with trio.open_nursery() as nursery:
                await store._start(nursery)
                try:
                    yield store
                finally:
                    with trio.CancelScope(shield=True), trio.move_on_after(SHUTDOWN_TIMEOUT_S):
                        await store._shutdown()
                    nursery.cancel_scope.cancel()
        finally:
            try:
                if store.consume is not None:
                    store.consume.close()
                queue, writeable = store.mapped_file_queue, store.running_flags.is_writeable()
                shutdown_files(root, queue, store.commit_log, store.flush_offset_file, writeable)
            finally:
                store.allocator.close()
                store.clean_commit_log.close()
                release_lock(lock_fd)

    def _load_and_recover(self, stop: threading.Event | None = None) -> None:
        queue = self.mapped_file_queue
        queue.load()
        result = recover(queue, self.config, stop)
        self.replica.recovered()
        if result.verify_from is not None:
            self._verify_tail = (result.verify_from, result.process_offset)
        if result.abnormal:
            for mapped_file in queue.mapped_files:
                if mapped_file.file_from_offset >= result.scanned_from:
                    mapped_file.sync()
        self.flush_offset_file = FlushOffsetFile(self.config.store_path_root_dir)
        self._on_flushed()
        self.flush_offset_file.sync()
        self.consume = ConsumeService.recover(
            self.config.store_path_root_dir,
            queue,
            units_per_file=self.config.mapped_file_size_consume_queue // CQ_STORE_UNIT_SIZE,
            readable_end=self._consumable_end,
            max_open_files=self.config.max_open_consume_queue_files,
            index=open_index(self.config, queue.min_offset, queue.max_offset, result.abnormal),
        )
        queue_ends = self.consume.table.topic_queue_table()
        self.commit_log.recovered(result.topic_queue_table, result.last_record, queue_ends)
        self.writer.on_appended = self.consume.note_appended
        self.clean_consume_queue = CleanConsumeQueueService(
            self.config, self.consume.table, lambda: queue.min_offset, self.consume.index
        )
        create_abort_file(self.config.store_path_root_dir)

    async def _start(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.allocator.run)
        self.writer.start(nursery)
        await nursery.start(self.flush.run)
        if self.commit_real_time is not None:
            await nursery.start(self.commit_real_time.run)
        if self.transfer is not None:
            await nursery.start(self.transfer.run)
        nursery.start_soon(self.disk.run)
        config, queue, flush = self.config, self.mapped_file_queue, self.flush
        nursery.start_soon(checkpoint_loop, config, queue, self.commit_log, lambda: flush.failed)
        nursery.start_soon(
            clean_files_periodically, self.clean_commit_log, self.clean_consume_queue
        )
        if self._verify_tail is not None:
            nursery.start_soon(verify_tail_loop, config, queue, *self._verify_tail)
        if self.consume is not None:
            await nursery.start(self.consume.run)

    async def _shutdown(self) -> None:
        self.writer.queue.close()  # puts are refused from now on
        await self.writer.done.wait()
        if self.commit_real_time is not None:
            await self.commit_real_time.shutdown()
        await self.flush.shutdown()
        if self.transfer is not None:
            self.transfer.shutdown()
        self.writer.deliver_pending_outcomes()

    # --- what the broker reads and calls ----------------------------------------------------

    @property
    def max_offset(self) -> int:
        return self.mapped_file_queue.max_offset

    @property
    def written_offset(self) -> int:
        return self.mapped_file_queue.max_wrote_offset

    @property
    def flushed_where(self) -> int:
        return self.mapped_file_queue.flushed_where

    @property
    def min_offset(self) -> int:
        return self.mapped_file_queue.min_offset

    @property
    def topic_queue_table(self) -> dict[str, int]:
        return self.commit_log.topic_queue_table

    @property
    def segment_count(self) -> int:
        return len(self.mapped_file_queue.mapped_files)

    @property
    def segments_deleted(self) -> dict[str, int]:
        """Segments retention deleted, by reason (expired, forced, manual)."""
        return {reason.value: n for reason, n in self.clean_commit_log.deleted.items()}

    @property
    def disk_ratio(self) -> float:
        """The used share of the store's disk at the last check."""
        return self.disk.ratio

    @property
    def writer_queue_depth(self) -> int:
        return len(self.writer.queue)

    @property
    def flush_count(self) -> int:
        return self.flush.flush_count

    def is_os_page_cache_busy(self) -> bool:
        """The writer has been inside one group longer than `os_page_cache_busy_timeout_ms`."""
        return self.writer.is_os_page_cache_busy()

    async def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        """Store one record; the status says whether (and how durably) it was stored."""
        return await self.writer.put([msg], batch=False)

    async def put_messages(self, msgs: list[MessageExtBrokerInner]) -> PutMessageResult:
        """Store a batch of one topic and queue as consecutive records with consecutive queue
        offsets, never spanning two segments. WAIT comes from the first message."""
        return await self.writer.put(msgs, batch=True)

    def submit_burst(
        self, puts: list[list[MessageExtBrokerInner]], on_results: BurstCallback
    ) -> None:
        """Several `put_messages` (one message: `put_message`) without a task waiting, as one
        request to the writer: `on_results` gets their outcomes in order later, from the
        store's callback task, or before this returns when all are refused at once. Must be
        called from the store's trio thread."""
        self.writer.submit_burst(puts, on_results)

    def execute_delete_files_manually(self) -> None:
        """TRIGGER_DELETE_FILES: a cleanup round now, and expired segments go at any hour in
        the rounds that follow."""
        self.clean_commit_log.execute_delete_files_manually()

    def delete_topic(self, topic: str) -> list[int]:
        """DELETE_TOPIC_IN_BROKER's part in the store (4.9's `cleanUnusedTopic` for one topic,
        `ConsumeService.delete_topic`), on the store's trio thread between two appends. The
        queue ids removed; raises OSError when the deletion mark cannot be written."""
        if self.consume is None:
            return []
        files = self.mapped_file_queue
        return self.consume.delete_topic(
            topic, self.commit_log.topic_queue_table, files.max_wrote_offset, files.min_offset
        )

    # --- what one part tells another ----------------------------------------------------------

    def _after_appends(self) -> None:
        """The writer appended a group: wake whoever moves it on (flush, commit, dispatch)."""
        self.replica.notify_readers()
        if self.sync_flush:
            self.group_commit.wakeup()
        elif self.commit_real_time is not None:
            self.commit_real_time.wakeup()
        else:
            self.flush_real_time.wakeup()
            if self.consume is not None:
                self.consume.wakeup()  # ASYNC_FLUSH: consumers need not wait for the flush

    def _deletable_end(self) -> int:
        """Retention deletes nothing at or past this offset: it must be flushed, committed (in
        write-buffer mode) and dispatched to the consume queues first."""
        queue = self.mapped_file_queue
        end = min(queue.flushed_where, queue.max_offset)
        return end if self.consume is None else min(end, self.consume.dispatched_offset)

    def _release_segments_below(self, offset: int) -> None:
        if self.consume is not None:
            self.consume.release_segments_below(offset)

    def _consumable_end(self) -> int:
        """How far the consume queues may follow the commit log: the durable offset under
        SYNC_FLUSH, what readers of the files can see (written or committed) under ASYNC_FLUSH;
        on a slave never past the last whole record its master sent."""
        queue = self.mapped_file_queue
        end = queue.flushed_where if self.sync_flush else queue.max_offset
        return min(end, self.replica.whole_end) if self.slave else end

    def _on_flushed(self) -> None:
        if self.flush_offset_file is not None:
            queue = self.mapped_file_queue
            self.flush_offset_file.update(
                queue.flushed_where, queue.max_offset, queue.mapped_file_size
            )
        if self.consume is not None:
            self.consume.wakeup()

    def _on_flush_failed(self, exc: OSError) -> None:
        if self.running_flags.set(status.NOT_WRITEABLE):
            log.error(
                "commit_log_flush_failed",
                error=str(exc),
                flushed_offset=self.mapped_file_queue.flushed_where,
                written_offset=self.mapped_file_queue.max_wrote_offset,
            )
