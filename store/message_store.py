"""`DefaultMessageStore`: the store's public face (RocketMQ `DefaultMessageStore` plus the put
half of `CommitLog`).

Owns the lifecycle (lock, recovery, abort file, services, orderly shutdown), the checks before
the writer in RocketMQ's order, the single writer task and its bounded channel, and the counters
the broker exports. Every put outcome is a `PutMessageStatus`; nothing here raises for a put.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import structlog
import trio

from store import status
from store.allocate import AllocateMappedFileService, CreateFile, TransientStorePool
from store.checkpoint import FlushOffsetFile, acquire_lock, create_abort_file, release_lock
from store.commit_log import Appended, CommitLog
from store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from store.consume_service import ConsumeService
from store.flush import (
    CommitRealTimeService,
    Flusher,
    FlushRealTimeService,
    GroupCommitService,
    PutRequest,
    thread_flusher,
)
from store.format import MAX_TOPIC_BYTES, EncodedBatch, encode_batch, topic_field
from store.mapped_file import create_segment_file
from store.mapped_file_queue import MappedFileQueue
from store.message import (
    AppendMessageResult,
    MessageExtBrokerInner,
    PutMessageResult,
    get_transaction_value,
    offset_msg_id,
)
from store.recovery import recover
from store.status import AppendMessageStatus, PutMessageStatus, RunningFlags
from store.store_tasks import StoreStats, checkpoint_loop, disk_check_loop, shutdown_files

log = structlog.get_logger()

MAX_PROPERTIES_CHARS = 32767
SHUTDOWN_TIMEOUT_S = 30.0
SlowPutHook = Callable[[float, PutMessageResult], None]


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
        self.mapped_file_queue = MappedFileQueue(
            config.store_path_commit_log, config.mapped_file_size_commit_log
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
        self.writer_busy_since: float | None = None
        self._send, self._receive = trio.open_memory_channel[PutRequest](config.put_queue_capacity)
        self._writer_done = trio.Event()

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
            await trio.to_thread.run_sync(store._load_and_recover)
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

    def _load_and_recover(self) -> None:
        queue = self.mapped_file_queue
        queue.load()
        result = recover(queue, self.config)
        if result.abnormal:
            for mapped_file in queue.mapped_files:
                if mapped_file.file_from_offset >= result.scanned_from:
                    mapped_file.sync()
        self.commit_log.reset_topic_queue_table(result.topic_queue_table)
        self.flush_offset_file = FlushOffsetFile(self.config.store_path_root_dir)
        self._on_flushed()
        self.flush_offset_file.sync()
        self.consume = ConsumeService.recover(self.config.store_path_root_dir, queue)
        create_abort_file(self.config.store_path_root_dir)

    async def _start(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.allocator.run)
        nursery.start_soon(self._writer)
        if self.sync_flush:
            await nursery.start(self.group_commit.run)
        else:
            await nursery.start(self.flush_real_time.run)
        if self.commit_real_time is not None:
            await nursery.start(self.commit_real_time.run)
        nursery.start_soon(disk_check_loop, self)
        nursery.start_soon(checkpoint_loop, self)
        if self.consume is not None:
            await nursery.start(self.consume.run)

    async def _shutdown(self) -> None:
        self.shutdown = True
        await self._send.aclose()
        await self._writer_done.wait()
        if self.commit_real_time is not None:
            await self.commit_real_time.shutdown()
        if self.sync_flush:
            await self.group_commit.shutdown()
        else:
            await self.flush_real_time.shutdown()

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
    def writer_queue_depth(self) -> int:
        return self._send.statistics().current_buffer_used

    @property
    def flush_count(self) -> int:
        return self.group_commit.flush_count + self.flush_real_time.flush_count

    def is_os_page_cache_busy(self) -> bool:
        """The writer has been inside one group longer than `os_page_cache_busy_timeout_ms`."""
        since = self.writer_busy_since
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

    @staticmethod
    def _check_message(msg: MessageExtBrokerInner) -> PutMessageStatus | None:
        if len(msg.topic) > MAX_TOPIC_BYTES or len(topic_field(msg.topic)) > MAX_TOPIC_BYTES + 1:
            return PutMessageStatus.MESSAGE_ILLEGAL
        if len(msg.properties_string) > MAX_PROPERTIES_CHARS:
            return PutMessageStatus.MESSAGE_ILLEGAL
        if "\x00" in msg.properties_string or "\x00" in msg.topic:
            # recovery reads NUL in these fields as a zero-filled (torn) write
            return PutMessageStatus.MESSAGE_ILLEGAL
        return None

    async def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        """Store one record; the status says whether (and how durably) it was stored."""
        started = trio.current_time()
        problem = self._check_store_status() or self._check_message(msg)
        if problem is not None:
            return self._finish(PutMessageResult(problem), 0, started)
        encoded = encode_batch([msg], self.now_ms(), self.config.max_message_size)
        return await self._submit(encoded, msg.wait_store_msg_ok, started)

    async def put_messages(self, msgs: list[MessageExtBrokerInner]) -> PutMessageResult:
        """Store a batch of one topic and queue as consecutive records with consecutive queue
        offsets, never spanning two segments. WAIT comes from the first message."""
        started = trio.current_time()
        problem = self._check_store_status() or self._check_batch(msgs)
        if problem is not None:
            return self._finish(PutMessageResult(problem), 0, started)
        encoded = encode_batch(msgs, self.now_ms(), self.config.max_message_size)
        return await self._submit(encoded, msgs[0].wait_store_msg_ok, started)

    def _check_batch(self, msgs: list[MessageExtBrokerInner]) -> PutMessageStatus | None:
        if not msgs:
            return PutMessageStatus.MESSAGE_ILLEGAL
        first = msgs[0]
        for msg in msgs:
            problem = self._check_message(msg)
            if problem is not None:
                return problem
            if (
                msg.topic != first.topic
                or msg.queue_id != first.queue_id
                or get_transaction_value(msg.sys_flag)
            ):
                return PutMessageStatus.MESSAGE_ILLEGAL
        if sum(len(msg.body) for msg in msgs) > self.config.max_message_size:
            return PutMessageStatus.MESSAGE_ILLEGAL
        return None

    async def _submit(
        self, encoded: EncodedBatch | AppendMessageStatus, wait: bool, started: float
    ) -> PutMessageResult:
        if isinstance(encoded, AppendMessageStatus):
            problem = (
                PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
                if encoded is AppendMessageStatus.PROPERTIES_SIZE_EXCEEDED
                else PutMessageStatus.MESSAGE_ILLEGAL
            )
            return self._finish(PutMessageResult(problem), 0, started)
        request = PutRequest(encoded, self.sync_flush and wait)
        try:
            self._send.send_nowait(request)
        except trio.WouldBlock:
            return self._finish(PutMessageResult(PutMessageStatus.WRITER_QUEUE_FULL), 0, started)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return self._finish(
                PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE), 0, started
            )
        put_status = await request.wait()
        appended = request.appended
        if not isinstance(appended, Appended):
            return self._finish(PutMessageResult(put_status), 0, started)
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

    async def _writer(self) -> None:
        """The single writer: drain everything queued, append it as one group, answer or hand on."""
        receive = self._receive
        max_group = self.config.max_group_size
        try:
            while True:
                try:
                    group = [await receive.receive()]
                except trio.EndOfChannel:
                    return
                while len(group) < max_group:
                    try:
                        group.append(receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                self.writer_busy_since = trio.current_time()
                try:
                    await self._append_group(group)
                finally:
                    self.writer_busy_since = None
        finally:
            self._writer_done.set()

    async def _append_group(self, group: list[PutRequest]) -> None:
        now_ms = self.now_ms()
        timeout_s = self.config.sync_flush_timeout_ms / 1000
        appended_any = False
        for request in group:
            if request.cancelled:
                continue
            result = await self.commit_log.put(request.batch, now_ms)
            if not isinstance(result, Appended):
                request.complete(result)
                continue
            appended_any = True
            request.appended = result
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
