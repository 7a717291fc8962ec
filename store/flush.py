"""The flush and commit services (RocketMQ `CommitLog.GroupCommitService`,
`FlushRealTimeService`, `CommitRealTimeService`, `FlushDiskWatcher`).

Owns when data is forced to disk and who is told. A flush that fails never advances the flushed
offset: every waiting put is answered with SERVICE_NOT_AVAILABLE, the service stops flushing
(after a failed fsync the page cache can no longer be trusted) and the store is told once.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Protocol

import outcome
import structlog
import trio

from store.config import MessageStoreConfig
from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue
from store.put_queue import PutRequest
from store.status import PutMessageStatus

log = structlog.get_logger()

SHUTDOWN_FLUSH_ROUNDS = 10


class Flusher(Protocol):
    """Forces a segment's written data to disk; raises OSError when the disk refuses."""

    async def __call__(self, mapped_file: MappedFile) -> None: ...


async def thread_flusher(mapped_file: MappedFile) -> None:
    """The default flusher: fdatasync in a worker thread (see `MappedFile.sync`).

    Uses trio's thread cache directly rather than `trio.to_thread.run_sync`: no capacity
    limiter and no renaming of the worker thread (two prctl calls) for every group commit.
    Like `to_thread`, a cancelled caller still waits for the fdatasync to finish.
    """
    await run_in_thread(mapped_file.sync)


async def run_in_thread(fn: Callable[[], None]) -> None:
    """Run `fn` in a cached worker thread; its exception is raised here."""
    await trio.lowlevel.checkpoint_if_cancelled()
    task = trio.lowlevel.current_task()
    token = trio.lowlevel.current_trio_token()

    def deliver(result: outcome.Outcome[None]) -> None:
        token.run_sync_soon(trio.lowlevel.reschedule, task, result)

    trio.lowlevel.start_thread_soon(fn, deliver)
    await trio.lowlevel.wait_task_rescheduled(_never_abort)


def _never_abort(_raise_cancel: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED  # the thread cannot be stopped: wait for it


FlushedHook = Callable[[], None]
FailedHook = Callable[[OSError], None]


class _Schedule:
    """RocketMQ's round schedule for the async flush and the commit: a round every interval
    (sooner when woken, unless `timed`), needing `least_pages` dirty pages, except a thorough
    round (any dirty data) once per thorough interval."""

    def __init__(self, interval_ms: int, thorough_ms: int, least_pages: int, timed: bool) -> None:
        self.interval = interval_ms / 1000
        self.thorough = thorough_ms / 1000
        self.least_pages = least_pages
        self.timed = timed
        self._last_thorough: float | None = None  # the first round starts the clock
        self._wake = trio.Event()

    def wakeup(self) -> None:
        self._wake.set()

    async def next_round(self) -> int:
        """Wait for the next round; the least pages it needs."""
        if self._last_thorough is None:
            self._last_thorough = trio.current_time()
        if self.timed:
            await trio.sleep(self.interval)
        else:
            with trio.move_on_after(self.interval):
                await self._wake.wait()
            self._wake = trio.Event()
        if trio.current_time() - self._last_thorough >= self.thorough:
            self._last_thorough = trio.current_time()
            return 0
        return self.least_pages


class _FlushServiceBase:
    def __init__(
        self,
        queue: MappedFileQueue,
        flusher: Flusher,
        on_flushed: FlushedHook,
        on_failed: FailedHook,
    ) -> None:
        self.queue = queue
        self.flusher = flusher
        self.on_flushed = on_flushed
        self.on_failed = on_failed
        self.failed = False
        self.flush_count = 0
        self._wake = trio.Event()

    def wakeup(self) -> None:
        self._wake.set()

    async def _flush(self, least_pages: int) -> bool:
        """One `MappedFileQueue.flush`; False when nothing was flushed or the flush failed."""
        if self.failed:
            return False
        try:
            flushed = await self.queue.flush(least_pages, self.flusher)
        except OSError as exc:
            self.failed = True
            self.on_failed(exc)
            return False
        if flushed:
            self.flush_count += 1
            self.on_flushed()
        return flushed


class GroupCommitService(_FlushServiceBase):
    """SYNC_FLUSH: one flush answers every waiting put whose end offset it covers."""

    def __init__(
        self,
        queue: MappedFileQueue,
        flusher: Flusher,
        on_flushed: FlushedHook,
        on_failed: FailedHook,
    ) -> None:
        super().__init__(queue, flusher, on_flushed, on_failed)
        self.pending: collections.deque[PutRequest] = collections.deque()
        self._pending_added = trio.Event()
        #: SYNC_MASTER: a flushed put that waits for a slave goes on here instead of PUT_OK
        self.forward: Callable[[PutRequest], None] | None = None

    def put_request(self, request: PutRequest) -> None:
        """Queue a put appended by the writer; its deadline is already set."""
        if self.failed:
            request.complete(PutMessageStatus.SERVICE_NOT_AVAILABLE)
            return
        self.pending.append(request)
        self._pending_added.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_deadlines)
            task_status.started()
            while True:
                # RocketMQ polls every 10 ms to cover WAIT=false appends; here the writer wakes
                # the service after every group, so it can sleep until there is work.
                await self._wake.wait()
                self._wake = trio.Event()
                await self.do_commit()

    async def do_commit(self) -> None:
        """Flush up to what is written now, then answer the puts it covers."""
        target = self.queue.max_offset
        for _ in range(len(self.queue.mapped_files) + 1):  # the data may span segments
            if self.queue.flushed_where >= target or not await self._flush(0):
                break
        if self.failed:
            self._fail_all()
            return
        flushed = self.queue.flushed_where
        pending = self.pending
        forward = self.forward
        while pending and pending[0].end_offset <= flushed:
            request = pending.popleft()
            if forward is not None and request.wait_replica:
                forward(request)
            else:
                request.complete(PutMessageStatus.PUT_OK)

    def _fail_all(self) -> None:
        while self.pending:
            self.pending.popleft().complete(PutMessageStatus.SERVICE_NOT_AVAILABLE)

    async def _watch_deadlines(self) -> None:
        """RocketMQ `FlushDiskWatcher`: a put still waiting at its deadline times out."""
        pending = self.pending
        while True:
            if not pending:
                self._pending_added = trio.Event()
                await self._pending_added.wait()
                continue
            await trio.sleep_until(pending[0].deadline)
            now = trio.current_time()
            while pending and pending[0].deadline <= now:
                pending.popleft().complete(PutMessageStatus.FLUSH_DISK_TIMEOUT)

    async def shutdown(self) -> None:
        await self.do_commit()
        while self.pending:
            self.pending.popleft().complete(PutMessageStatus.FLUSH_DISK_TIMEOUT)


class FlushRealTimeService(_FlushServiceBase):
    """ASYNC_FLUSH: flush every interval when enough pages are dirty, everything now and then."""

    def __init__(
        self,
        config: MessageStoreConfig,
        queue: MappedFileQueue,
        flusher: Flusher,
        on_flushed: FlushedHook,
        on_failed: FailedHook,
    ) -> None:
        super().__init__(queue, flusher, on_flushed, on_failed)
        self.config = config
        self._schedule = _Schedule(
            config.flush_interval_commit_log_ms,
            config.flush_commit_log_thorough_interval_ms,
            config.flush_commit_log_least_pages,
            config.flush_commit_log_timed,
        )

    def wakeup(self) -> None:
        self._schedule.wakeup()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self.flush_round(await self._schedule.next_round())

    async def flush_round(self, least_pages: int) -> None:
        """Flush segment after segment (RocketMQ does one per round; with small segments the
        flushed offset would fall behind) until caught up or the page rule says wait."""
        for _ in range(len(self.queue.mapped_files) + 1):
            if self.queue.flushed_where >= self.queue.max_offset or not await self._flush(
                least_pages
            ):
                break

    async def shutdown(self) -> None:
        for _ in range(SHUTDOWN_FLUSH_ROUNDS):
            await self.flush_round(0)
            if self.failed or self.queue.flushed_where >= self.queue.max_offset:
                break


class CommitRealTimeService:
    """Write-buffer mode: copy appended data into the file on RocketMQ's schedule, then wake the
    flush service. Segments whose buffer is fully committed give it back to the pool."""

    def __init__(
        self,
        config: MessageStoreConfig,
        queue: MappedFileQueue,
        flush_service: FlushRealTimeService,
        return_buffer: Callable[[bytearray], None],
    ) -> None:
        self.config = config
        self.queue = queue
        self.flush_service = flush_service
        self.return_buffer = return_buffer
        self.commit_count = 0
        #: a commit failed (EIO, ENOSPC...): the store is not writeable and commits stop
        self.failed = False
        self._schedule = _Schedule(
            config.commit_interval_commit_log_ms,
            config.commit_commit_log_thorough_interval_ms,
            config.commit_commit_log_least_pages,
            timed=False,
        )

    def wakeup(self) -> None:
        self._schedule.wakeup()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            if await self.commit(await self._schedule.next_round()):
                self.flush_service.wakeup()

    async def commit(self, least_pages: int) -> bool:
        """Commit what the schedule allows; a failure is handed to the flush service's failure
        hook (the store stops taking puts) instead of ending the service and the store."""
        committed = False
        if self.failed:
            return committed
        try:
            while await self.queue.commit(least_pages):
                committed = True
                self.commit_count += 1
                self._release_committed_buffers()
        except OSError as exc:
            self.failed = True
            self.flush_service.on_failed(exc)
        return committed

    def _release_committed_buffers(self) -> None:
        for mapped_file in self.queue.mapped_files:
            buffer = mapped_file.write_buffer
            if (
                buffer is not None
                and mapped_file.is_full()
                and mapped_file.committed_position >= mapped_file.file_size
            ):
                mapped_file.write_buffer = None
                self.return_buffer(buffer)

    async def shutdown(self) -> None:
        await self.commit(0)
