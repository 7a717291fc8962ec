"""`DefaultMessageStore`: the store's public face (RocketMQ `DefaultMessageStore` plus the put
half of `CommitLog`).

Owns the lifecycle (lock, recovery, abort file, services, orderly shutdown), the checks before
the writer in RocketMQ's order (message checks in `put_checks`), the single writer task fed by
a bounded `WriterQueue`, and the counters the broker exports. Every put outcome is a
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
from store.commit_log import Appended, CommitLog
from store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from store.consume_queue import CQ_STORE_UNIT_SIZE
from store.consume_service import ConsumeService
from store.flush import (
    CommitRealTimeService,
    Flusher,
    FlushRealTimeService,
    GroupCommitService,
    PutCallback,
    PutRequest,
    thread_flusher,
)
from store.format import EncodedBatch, encode_batch
from store.mapped_file import create_segment_file
from store.mapped_file_queue import MappedFileQueue
from store.message import (
    AppendMessageResult,
    MessageExtBrokerInner,
    PutMessageResult,
    offset_msg_id,
)
from store.parking import ParkingSpot
from store.put_checks import check_batch, check_message
from store.recovery import recover
from store.status import AppendMessageStatus, PutMessageStatus, RunningFlags
from store.store_tasks import (
    StoreStats,
    apply_disk_ratio,
    checkpoint_loop,
    disk_check_loop,
    run_stoppable,
    shutdown_files,
    verify_tail_loop,
)
from store.writer_queue import WriterQueue

log = structlog.get_logger()

SHUTDOWN_TIMEOUT_S = 30.0
SlowPutHook = Callable[[float, PutMessageResult], None]
#: receives a submitted put's outcome, in the store's task; it must not block or raise
ResultCallback = Callable[[PutMessageResult], None]


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
        self.on_slow_put = on_slow_put
        self.running_flags = RunningFlags()
        self.stats = StoreStats()
        self.shutdown = False
        #: the used share of the store's disk at the last check
        self.disk_ratio = 0.0
        self.mapped_file_queue = MappedFileQueue(
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
        self.commit_log = CommitLog(self.mapped_file_queue, self.allocator)
        self.sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        queue = self.mapped_file_queue
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
        self.flush_offset_file: FlushOffsetFile | None = None
        self.consume: ConsumeService | None = None  # consume queues, set by recovery
        self.clean_commit_log = CleanCommitLogService(
            config,
            queue,
            deletable_end=self._deletable_end,
            on_disk_ratio=lambda ratio: apply_disk_ratio(self, ratio),
            release_below=self._release_segments_below,
            wall_ms=now_ms,
        )
        self.clean_consume_queue: CleanConsumeQueueService | None = None
        #: (from, to) of a clean stop's log, checked in the background once the store runs
        self._verify_tail: tuple[int, int] | None = None
        self._queue = WriterQueue()
        self._writer_done = trio.Event()
        # Outcomes of submitted puts waiting for `_deliver_outcomes`, and that task when parked.
        self._outcomes: list[tuple[ResultCallback, PutRequest, PutMessageStatus, float]] = []
        self._deliverer_spot = ParkingSpot()

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
        os.makedirs(config.store_path_commit_log, exist_ok=True)
        os.makedirs(os.path.join(root, "config"), exist_ok=True)
        lock_fd = acquire_lock(root)
        store = cls(
            config, flusher=flusher, create_file=create_file, now_ms=now_ms, on_slow_put=on_slow_put
        )
        try:
            await _recover_until_cancelled(store)
            async with trio.open_nursery() as nursery:
                await store._start(nursery)
                try:
                    yield store
                finally:
                    with trio.CancelScope(shield=True), trio.move_on_after(SHUTDOWN_TIMEOUT_S):
                        await store._shutdown()
                    nursery.cancel_scope.cancel()
        finally:
            if store.consume is not None:
                store.consume.close()
            shutdown_files(store)
            release_lock(lock_fd)

    def _load_and_recover(self, stop: threading.Event | None = None) -> None:
        queue = self.mapped_file_queue
        queue.load()
        result = recover(queue, self.config, stop)
        if result.verify_from is not None:
            self._verify_tail = (result.verify_from, result.process_offset)
        if result.abnormal:
            for mapped_file in queue.mapped_files:
                if mapped_file.file_from_offset >= result.scanned_from:
                    mapped_file.sync()
        self.commit_log.reset_topic_queue_table(result.topic_queue_table)
        self.flush_offset_file = FlushOffsetFile(self.config.store_path_root_dir)
        self._on_flushed()
        self.flush_offset_file.sync()
        self.consume = ConsumeService.recover(
            self.config.store_path_root_dir,
            queue,
            units_per_file=self.config.mapped_file_size_consume_queue // CQ_STORE_UNIT_SIZE,
            readable_end=self._consumable_end,
            max_open_files=self.config.max_open_consume_queue_files,
        )
        table = self.commit_log.topic_queue_table
        for key, end in self.consume.table.topic_queue_table().items():
            # A queue whose records retention deleted still goes on from its consume queue's end.
            if table.get(key, 0) < end:
                table[key] = end
        self.clean_consume_queue = CleanConsumeQueueService(
            self.config, self.consume.table, lambda: queue.min_offset
        )
        create_abort_file(self.config.store_path_root_dir)

    async def _start(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.allocator.run)
        nursery.start_soon(self._writer)
        nursery.start_soon(
            self._queue.sweep_stale, self.config.os_page_cache_busy_timeout_ms / 1000
        )
        nursery.start_soon(self._deliver_outcomes)
        if self.sync_flush:
            await nursery.start(self.group_commit.run)
        else:
            await nursery.start(self.flush_real_time.run)
        if self.commit_real_time is not None:
            await nursery.start(self.commit_real_time.run)
        nursery.start_soon(disk_check_loop, self)
        nursery.start_soon(checkpoint_loop, self)
        nursery.start_soon(
            clean_files_periodically, self.clean_commit_log, self.clean_consume_queue
        )
        if self._verify_tail is not None:
            nursery.start_soon(verify_tail_loop, self, *self._verify_tail)
        if self.consume is not None:
            await nursery.start(self.consume.run)

    async def _shutdown(self) -> None:
        self.shutdown = True
        self._queue.close()
        await self._writer_done.wait()
        if self.commit_real_time is not None:
            await self.commit_real_time.shutdown()
        if self.sync_flush:
            await self.group_commit.shutdown()
        else:
            await self.flush_real_time.shutdown()
        self._deliver_pending_outcomes()

    # --- what the broker and metrics read ---------------------------------------------------

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
    def writer_queue_depth(self) -> int:
        return len(self._queue)

    @property
    def flush_count(self) -> int:
        return self.group_commit.flush_count + self.flush_real_time.flush_count

    def is_os_page_cache_busy(self) -> bool:
        """The writer has been inside one group longer than `os_page_cache_busy_timeout_ms`."""
        since = self._queue.busy_since
        if since is None:
            return False
        return (trio.current_time() - since) * 1000 > self.config.os_page_cache_busy_timeout_ms

    # --- the put path ----------------------------------------------------------------------

    def _check_store_status(self) -> PutMessageStatus | None:
        if self.shutdown or self.config.broker_role is BrokerRole.SLAVE:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE
        if not self.running_flags.is_writeable():
            return PutMessageStatus.SERVICE_NOT_AVAILABLE
        if self.is_os_page_cache_busy():
            return PutMessageStatus.OS_PAGE_CACHE_BUSY
        return None

    async def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        """Store one record; the status says whether (and how durably) it was stored."""
        started = trio.current_time()
        problem = self._check_store_status() or check_message(msg)
        if problem is not None:
            return self._finish(PutMessageResult(problem), 0, started)
        encoded = encode_batch([msg], self.now_ms(), self.config.max_message_size)
        return await self._submit_and_wait(encoded, msg.wait_store_msg_ok, started)

    async def put_messages(self, msgs: list[MessageExtBrokerInner]) -> PutMessageResult:
        """Store a batch of one topic and queue as consecutive records with consecutive queue
        offsets, never spanning two segments. WAIT comes from the first message."""
        started = trio.current_time()
        problem = self._check_store_status() or check_batch(msgs, self.config.max_message_size)
        if problem is not None:
            return self._finish(PutMessageResult(problem), 0, started)
        encoded = encode_batch(msgs, self.now_ms(), self.config.max_message_size)
        return await self._submit_and_wait(encoded, msgs[0].wait_store_msg_ok, started)

    def submit_messages(self, msgs: list[MessageExtBrokerInner], on_result: ResultCallback) -> None:
        """`put_messages` (one message: `put_message`) without a task waiting: `on_result`
        gets the outcome later, from the store's callback task, or before this returns when
        the put is refused at once. Must be called from the store's trio thread."""
        started = trio.current_time()
        if len(msgs) == 1:
            problem = self._check_store_status() or check_message(msgs[0])
        else:
            problem = self._check_store_status() or check_batch(msgs, self.config.max_message_size)
        if problem is not None:
            on_result(self._finish(PutMessageResult(problem), 0, started))
            return
        encoded = encode_batch(msgs, self.now_ms(), self.config.max_message_size)

        def delivered(request: PutRequest, put_status: PutMessageStatus) -> None:
            # Deferred to the callback task: the writer and the flush service go straight
            # back to appending and flushing (the next fdatasync overlaps the callbacks).
            self._outcomes.append((on_result, request, put_status, started))
            self._deliverer_spot.wake()

        request = self._submit(encoded, msgs[0].wait_store_msg_ok, started, delivered)
        if isinstance(request, PutMessageResult):
            on_result(request)

    def _submit(
        self,
        encoded: EncodedBatch | AppendMessageStatus,
        wait: bool,
        started: float,
        callback: PutCallback | None = None,
    ) -> PutRequest | PutMessageResult:
        """Queue an encoded put for the writer; a refusal is returned as a finished result."""
        if isinstance(encoded, AppendMessageStatus):
            problem = (
                PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
                if encoded is AppendMessageStatus.PROPERTIES_SIZE_EXCEEDED
                else PutMessageStatus.MESSAGE_ILLEGAL
            )
            return self._finish(PutMessageResult(problem), 0, started)
        if self._queue.closed:
            return self._finish(
                PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE), 0, started
            )
        if len(self._queue) >= self.config.put_queue_capacity:
            return self._finish(PutMessageResult(PutMessageStatus.WRITER_QUEUE_FULL), 0, started)
        request = PutRequest(encoded, self.sync_flush and wait, callback, started)
        self._queue.put(request)
        return request

    async def _submit_and_wait(
        self, encoded: EncodedBatch | AppendMessageStatus, wait: bool, started: float
    ) -> PutMessageResult:
        request = self._submit(encoded, wait, started)
        if isinstance(request, PutMessageResult):
            return request
        put_status = await request.wait()
        return self._result(request, put_status, started)

    def _result(
        self, request: PutRequest, put_status: PutMessageStatus, started: float
    ) -> PutMessageResult:
        """The finished result of a put the writer answered."""
        appended = request.appended
        if not isinstance(appended, Appended):
            return self._finish(PutMessageResult(put_status), 0, started)
        encoded = request.batch
        host = encoded.store_host_bytes
        base = appended.wrote_offset
        append_result = AppendMessageResult(
            status=AppendMessageStatus.PUT_OK,
            wrote_offset=base,
            wrote_bytes=len(encoded.data),
            msg_ids=(offset_msg_id(host, base),)
            if len(encoded.records) == 1
            else tuple(offset_msg_id(host, base + start) for start, _ in encoded.records),
            store_timestamp=appended.store_timestamp,
            logics_offset=appended.logics_offset,
            msg_num=len(encoded.records),
        )
        return self._finish(PutMessageResult(put_status, append_result), len(encoded.data), started)

    def _finish(self, result: PutMessageResult, size: int, started: float) -> PutMessageResult:
        self.stats.record(result.status, size)
        elapsed_ms = (trio.current_time() - started) * 1000
        if elapsed_ms > self.config.slow_put_threshold_ms:
            self.stats.slow_puts += 1
            log.warning("slow_put", elapsed_ms=round(elapsed_ms, 1), status=result.status.name)
            if self.on_slow_put is not None:
                self.on_slow_put(elapsed_ms, result)
        return result

    # --- the writer ------------------------------------------------------------------------

    async def _writer(self) -> None:
        """The single writer: take everything queued, append it as one group, answer or hand on."""
        queue = self._queue
        max_group = self.config.max_group_size
        try:
            while (group := await queue.take(max_group)) is not None:
                try:
                    await self._append_group(group)
                finally:
                    queue.group_done()
                if len(queue):
                    # Let the producers and the flush service run between groups.
                    await trio.lowlevel.cancel_shielded_checkpoint()
        finally:
            self._writer_done.set()

    async def _append_group(self, group: list[PutRequest]) -> None:
        now_ms = self.now_ms()
        timeout_s = self.config.sync_flush_timeout_ms / 1000
        appended_any = False
        consume = self.consume
        for index, request in enumerate(group):
            self._queue.next = index + 1
            if request.cancelled or request.done:
                continue  # the caller gave up, or it was answered busy: never append it
            result = await self.commit_log.put(request.batch, now_ms)
            if not isinstance(result, Appended):
                request.complete(result)
                continue
            appended_any = True
            request.appended = result
            if consume is not None:
                consume.note_appended(request.batch, result.wrote_offset, result.logics_offset)
            if request.wait_flush:
                request.end_offset = result.wrote_offset + len(request.batch.data)
                request.deadline = trio.current_time() + timeout_s
                self.group_commit.put_request(request)
            else:
                request.complete(PutMessageStatus.PUT_OK)
        if appended_any:
            if self.sync_flush:
                self.group_commit.wakeup()
            elif self.commit_real_time is not None:
                self.commit_real_time.wakeup()
            else:
                self.flush_real_time.wakeup()
                if self.consume is not None:
                    self.consume.wakeup()  # ASYNC_FLUSH: consumers need not wait for the flush

    def execute_delete_files_manually(self) -> None:
        """TRIGGER_DELETE_FILES: a cleanup round now, and expired segments go at any hour in
        the rounds that follow."""
        self.clean_commit_log.execute_delete_files_manually()

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
        SYNC_FLUSH, what readers of the files can see (written or committed) under ASYNC_FLUSH."""
        queue = self.mapped_file_queue
        return queue.flushed_where if self.sync_flush else queue.max_offset

    # --- outcomes of submitted puts ---------------------------------------------------------

    async def _deliver_outcomes(self) -> None:
        """Run the callbacks of `submit_messages` puts, a batch per wake-up."""
        while True:
            if not self._outcomes:
                await self._deliverer_spot.park()
            # One more turn first, so a flush service woken with us starts its next fdatasync
            # (in a thread) before the callbacks take the CPU; more outcomes gather meanwhile.
            await trio.lowlevel.cancel_shielded_checkpoint()
            self._deliver_pending_outcomes()

    def _deliver_pending_outcomes(self) -> None:
        while self._outcomes:
            outcomes, self._outcomes = self._outcomes, []
            for on_result, request, put_status, started in outcomes:
                try:
                    on_result(self._result(request, put_status, started))
                except Exception:
                    log.exception("put_callback_failed", status=put_status.name)

    # --- flush outcomes --------------------------------------------------------------------

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


async def _recover_until_cancelled(store: DefaultMessageStore) -> None:
    """Run the load and recovery in a worker thread; a cancel (a signal at startup) stops its
    read-only scan instead of waiting for the whole log, and then raises Cancelled."""
    await run_stoppable(store._load_and_recover, stopped_event="recovery_stopped")
