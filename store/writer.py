"""The store's single writer (RocketMQ: the checks of `DefaultMessageStore.asyncPutMessage`, then
what `CommitLog.asyncPutMessage` does under the put lock, with `DefaultAppendMessageCallback`):
the puts waiting for it, the one task that appends them, and the delivery of their outcomes.

Owns `PutRequest` (one put on its way writer -> group commit -> caller), `WriterQueue` (the puts
waiting, the group being appended, the busy answer for puts stuck behind a slow writer) and
`CommitLogWriter`: a put's way in (its checks in `put_checks`, its encoding, the queue) and the
only task that appends to the commit log's segments. It takes everything queued as one group (up
to `max_group_size`), appends it through `CommitLog.put`, tells the consume side what it
appended, answers ASYNC puts at once and hands SYNC ones to the group commit, then wakes the
flush services once per group. Puts submitted with a callback get their outcome from a separate
task, so the writer and the flush service go straight back to work. Knows nothing of sockets or
request codes; every outcome is a `PutMessageStatus`, never an exception.

`WriterQueue` uses a deque and one parked task instead of a memory channel, so a put costs an
append and at most one reschedule. `group[next:]` are puts the writer has taken but not started
to append; with the deque they are the puts that may still be answered busy when they have
waited longer than `os_page_cache_busy_timeout_ms` (RocketMQ's PCBUSY_CLEAN_QUEUE): such a put is
completed OS_PAGE_CACHE_BUSY and the writer skips it, so it is answered busy or stored, never
both.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import cast

import outcome
import structlog
import trio

from store.commit_log import Appended, CommitLog
from store.config import MessageStoreConfig
from store.encode import EncodedBatch, encode_batch
from store.message import (
    AppendMessageResult,
    MessageExtBrokerInner,
    PutMessageResult,
    offset_msg_id,
)
from store.parking import ParkingSpot
from store.put_checks import check_batch, check_message, check_store
from store.status import AppendMessageStatus, PutMessageStatus, RunningFlags

log = structlog.get_logger()

#: receives a submitted put's outcome, in the store's task; it must not block or raise
ResultCallback = Callable[[PutMessageResult], None]
#: receives the outcomes of a submitted burst, in submission order, in the store's task
BurstCallback = Callable[[list[PutMessageResult]], None]
#: records a finished put (counters, slow puts) and returns it: `StoreStats.finish`
Finish = Callable[[PutMessageResult, int, float], PutMessageResult]
#: the writer appended a batch: (batch, where it starts, its first queue offset)
AppendedHook = Callable[[EncodedBatch, int, int], None]
#: a put's completion hook: (the request, its status); it must not raise
PutCallback = Callable[["PutRequest", PutMessageStatus], None]


class PutRequest:
    """The puts of one submission (one message, a batch, or a receive burst of either)
    travelling writer -> (flush service) -> caller.

    Completed exactly once: either the waiting task is rescheduled with the status (unless it
    was cancelled first) or `callback` is called. Cheaper than a `trio.Event` per put: no
    parking lot, one reschedule. `enqueued_at` (trio time) lets the store answer a request busy
    once it has waited too long without being appended. `appended` gets, per batch, where the
    writer put it or why it could not; `results` are the caller's answers in submission order
    (those refused before the queue filled in already), `positions` where each batch's goes.
    """

    __slots__ = (
        "appended",
        "batches",
        "callback",
        "cancelled",
        "deadline",
        "done",
        "end_offset",
        "enqueued_at",
        "on_results",
        "positions",
        "results",
        "task",
        "wait_flush",
    )

    def __init__(
        self,
        batches: list[EncodedBatch],
        wait_flush: bool,
        callback: PutCallback | None = None,
        enqueued_at: float = 0.0,
    ) -> None:
        self.batches = batches
        self.wait_flush = wait_flush
        self.callback = callback
        self.task = trio.lowlevel.current_task() if callback is None else None
        self.enqueued_at = enqueued_at
        self.cancelled = False
        self.done = False
        self.appended: list[Appended | PutMessageStatus] = []
        self.end_offset = 0
        self.deadline = 0.0
        self.results: list[PutMessageResult | None] = []
        self.positions: list[int] = []
        self.on_results: BurstCallback | None = None

    def abort(self, _raise_cancel: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        self.cancelled = True
        return trio.lowlevel.Abort.SUCCEEDED

    def complete(self, status: PutMessageStatus) -> None:
        if self.done or self.cancelled:
            return
        self.done = True
        callback = self.callback
        if callback is None:
            trio.lowlevel.reschedule(cast(trio.lowlevel.Task, self.task), outcome.Value(status))
            return
        try:
            callback(self, status)
        except Exception:
            # The caller's hook failed: its own put is lost to it, the store's task goes on.
            log.exception("put_callback_failed", status=status.name)

    async def wait(self) -> PutMessageStatus:
        result: PutMessageStatus = await trio.lowlevel.wait_task_rescheduled(self.abort)
        return result


class WriterQueue:
    def __init__(self) -> None:
        self._waiting: collections.deque[PutRequest] = collections.deque()
        self._spot = ParkingSpot()
        self.closed = False
        #: the group being appended and the index of its next put
        self.group: list[PutRequest] = []
        self.next = 0
        #: when the writer started its current group (None between groups)
        self.busy_since: float | None = None

    def __len__(self) -> int:
        return len(self._waiting)

    def put(self, request: PutRequest) -> None:
        self._waiting.append(request)
        self._spot.wake()

    def close(self) -> None:
        """No more puts: the writer finishes what is queued, then `take` returns None."""
        self.closed = True
        self._spot.wake()

    async def take(self, max_group: int) -> list[PutRequest] | None:
        """The next group (parks while nothing waits); None once closed and drained."""
        waiting = self._waiting
        while not waiting:
            if self.closed:
                return None
            await self._spot.park()
        count = min(len(waiting), max_group)
        self.group = [waiting.popleft() for _ in range(count)]
        self.next = 0
        self.busy_since = trio.current_time()
        return self.group

    def group_done(self) -> None:
        self.busy_since = None
        self.group = []
        self.next = 0

    # --- puts stuck behind the writer ----------------------------------------------------------

    async def sweep_stale(self, timeout_s: float) -> None:
        """Answer busy every put that has waited `timeout_s` without being appended. One task,
        sleeping until the oldest waiting put is due: no timer per put."""
        while True:
            oldest = self._oldest_waiting()
            if oldest is None:
                await trio.sleep(timeout_s)
                continue
            await trio.sleep_until(oldest + timeout_s)
            self.answer_stale(trio.current_time() - timeout_s)

    def _oldest_waiting(self) -> float | None:
        group = self.group
        for index in range(self.next, len(group)):
            request = group[index]
            if not (request.done or request.cancelled):
                return request.enqueued_at
        return self._waiting[0].enqueued_at if self._waiting else None

    def answer_stale(self, cutoff: float) -> int:
        """Complete OS_PAGE_CACHE_BUSY every unanswered put enqueued at or before `cutoff`."""
        busy = PutMessageStatus.OS_PAGE_CACHE_BUSY
        group = self.group
        answered = 0
        for index in range(self.next, len(group)):
            request = group[index]
            if request.enqueued_at <= cutoff and not (request.done or request.cancelled):
                answered += 1
                request.complete(busy)  # done now: the writer will skip it
        waiting = self._waiting
        while waiting and waiting[0].enqueued_at <= cutoff:
            request = waiting.popleft()
            if not (request.done or request.cancelled):
                answered += 1
                request.complete(busy)
        if answered:
            log.warning("stale_puts_answered_busy", puts=answered, queued=len(waiting))
        return answered


class CommitLogWriter:
    """The put's way in (`put`, `submit_messages`), the writer task (`run`) and the outcome
    task (`deliver_outcomes`)."""

    def __init__(
        self,
        config: MessageStoreConfig,
        commit_log: CommitLog,
        running_flags: RunningFlags,
        *,
        now_ms: Callable[[], int],
        sync_flush: bool,
        to_group_commit: Callable[[PutRequest], None],
        after_appends: Callable[[], None],
        finish: Finish,
    ) -> None:
        self.config = config
        self.commit_log = commit_log
        self.running_flags = running_flags
        self.now_ms = now_ms
        self.sync_flush = sync_flush
        self.to_group_commit = to_group_commit
        self.after_appends = after_appends
        self.finish = finish
        self.queue = WriterQueue()
        #: set once the writer has appended its last group (the store is closing)
        self.done = trio.Event()
        #: told of every append; set once the consume side exists (after recovery)
        self.on_appended: AppendedHook | None = None
        # Submitted requests completed, waiting for `deliver_outcomes`, and that task when parked.
        self._outcomes: list[tuple[PutRequest, PutMessageStatus]] = []
        self._deliverer_spot = ParkingSpot()

    # --- the way in -------------------------------------------------------------------------

    async def put(self, msgs: list[MessageExtBrokerInner], *, batch: bool) -> PutMessageResult:
        """Store `msgs` (one message, or a batch when `batch`) and wait for the outcome."""
        request = self._prepare([msgs], batch, None)
        if request.batches:
            put_status = await request.wait()
            self._fill_results(request, put_status)
        return cast(PutMessageResult, request.results[0])

    def submit_messages(self, msgs: list[MessageExtBrokerInner], on_result: ResultCallback) -> None:
        """`put` without a task waiting (a batch unless one message): `on_result` gets the
        outcome from the outcome task, or before this returns when the put is refused at once."""
        self.submit_burst([msgs], lambda results: on_result(results[0]))

    def submit_burst(
        self, puts: list[list[MessageExtBrokerInner]], on_results: BurstCallback
    ) -> None:
        """Several puts (each one message, or a batch unless one message) as one request to the
        writer: appended in one pass, flushed together, and `on_results` called once with their
        outcomes in order, from the outcome task or before this returns when all are refused.
        Under SYNC_FLUSH the puts of a burst are answered together once all are flushed."""
        request = self._prepare(puts, None, self._queue_outcome, on_results)
        if not request.batches:
            on_results(cast(list[PutMessageResult], request.results))

    def _prepare(
        self,
        puts: list[list[MessageExtBrokerInner]],
        batch: bool | None,
        callback: PutCallback | None,
        on_results: BurstCallback | None = None,
    ) -> PutRequest:
        """The checks before the writer in RocketMQ's order (a batch's own rules when `batch`,
        None: when more than one message), the encoding, then one request on the queue for the
        puts that passed; those refused have their results already."""
        started = trio.current_time()
        config = self.config
        queue = self.queue
        request = PutRequest([], False, callback, started)
        request.on_results = on_results
        results = request.results = [None] * len(puts)
        problem = check_store(
            config, self.running_flags, queue.closed, self.is_os_page_cache_busy()
        )
        if problem is None and len(queue) >= config.put_queue_capacity:
            problem = PutMessageStatus.WRITER_QUEUE_FULL
        now_ms = self.now_ms()
        for position, msgs in enumerate(puts):
            own = problem
            if own is None:
                as_batch = len(msgs) != 1 if batch is None else batch
                max_size = config.max_message_size
                own = check_batch(msgs, max_size) if as_batch else check_message(msgs[0])
            if own is None:
                encoded = encode_batch(msgs, now_ms, config.max_message_size)
                if not isinstance(encoded, AppendMessageStatus):
                    request.batches.append(encoded)
                    request.positions.append(position)
                    request.wait_flush = request.wait_flush or msgs[0].wait_store_msg_ok
                    continue
                own = (
                    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
                    if encoded is AppendMessageStatus.PROPERTIES_SIZE_EXCEEDED
                    else PutMessageStatus.MESSAGE_ILLEGAL
                )
            results[position] = self.finish(PutMessageResult(own), 0, started)
        if request.batches:
            request.wait_flush = request.wait_flush and self.sync_flush
            queue.put(request)
        return request

    def _queue_outcome(self, request: PutRequest, put_status: PutMessageStatus) -> None:
        # Deferred to the outcome task: the writer and the flush service go straight back to
        # appending and flushing (the next fdatasync overlaps the callbacks).
        self._outcomes.append((request, put_status))
        self._deliverer_spot.wake()

    def is_os_page_cache_busy(self) -> bool:
        """The writer has been inside one group longer than `os_page_cache_busy_timeout_ms`."""
        since = self.queue.busy_since
        if since is None:
            return False
        return (trio.current_time() - since) * 1000 > self.config.os_page_cache_busy_timeout_ms

    def _fill_results(self, request: PutRequest, put_status: PutMessageStatus) -> None:
        """The finished result of each batch of a request the writer answered: its own status
        when it was not appended, else the request's with where it went."""
        results, appended, started = request.results, request.appended, request.enqueued_at
        finish = self.finish
        for part, batch in enumerate(request.batches):
            where = appended[part] if part < len(appended) else put_status
            position = request.positions[part]
            if not isinstance(where, Appended):
                results[position] = finish(PutMessageResult(where), 0, started)
                continue
            host = batch.store_host_bytes
            base = where.wrote_offset
            records = batch.records
            append_result = AppendMessageResult(
                status=AppendMessageStatus.PUT_OK,
                wrote_offset=base,
                wrote_bytes=len(batch.data),
                msg_ids=(offset_msg_id(host, base),)
                if len(records) == 1
                else tuple(offset_msg_id(host, base + start) for start, _ in records),
                store_timestamp=where.store_timestamp,
                logics_offset=where.logics_offset,
                msg_num=len(records),
            )
            results[position] = finish(
                PutMessageResult(put_status, append_result), len(batch.data), started
            )

    # --- the writer --------------------------------------------------------------------------

    def start(self, nursery: trio.Nursery) -> None:
        """The writer, the answer for puts stuck behind it, and the outcome delivery."""
        nursery.start_soon(self.run)
        nursery.start_soon(self.queue.sweep_stale, self.config.os_page_cache_busy_timeout_ms / 1000)
        nursery.start_soon(self.deliver_outcomes)

    async def run(self) -> None:
        """The single writer: take everything queued, append it as one group, answer or hand on."""
        queue = self.queue
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
            self.done.set()

    async def _append_group(self, group: list[PutRequest]) -> None:
        now_ms = self.now_ms()
        timeout_s = self.config.sync_flush_timeout_ms / 1000
        appended_any = False
        on_appended = self.on_appended
        queue = self.queue
        put = self.commit_log.put
        for index, request in enumerate(group):
            queue.next = index + 1
            if request.cancelled or request.done:
                continue  # the caller gave up, or it was answered busy: never append it
            appended = request.appended
            end = -1
            for batch in request.batches:
                result = await put(batch, now_ms)
                appended.append(result)
                if isinstance(result, Appended):
                    end = result.wrote_offset + len(batch.data)
                    if on_appended is not None:
                        on_appended(batch, result.wrote_offset, result.logics_offset)
            if end < 0:
                request.complete(cast(PutMessageStatus, appended[-1]))  # each has its status
                continue
            appended_any = True
            if request.wait_flush:
                request.end_offset = end
                request.deadline = trio.current_time() + timeout_s
                self.to_group_commit(request)
            else:
                request.complete(PutMessageStatus.PUT_OK)
        if appended_any:
            self.after_appends()

    # --- outcomes of submitted puts -----------------------------------------------------------

    async def deliver_outcomes(self) -> None:
        """Run the callbacks of `submit_messages` puts, a batch per wake-up."""
        while True:
            if not self._outcomes:
                await self._deliverer_spot.park()
            # One more turn first, so a flush service woken with us starts its next fdatasync
            # (in a thread) before the callbacks take the CPU; more outcomes gather meanwhile.
            await trio.lowlevel.cancel_shielded_checkpoint()
            self.deliver_pending_outcomes()

    def deliver_pending_outcomes(self) -> None:
        while self._outcomes:
            outcomes, self._outcomes = self._outcomes, []
            for request, put_status in outcomes:
                try:
                    self._fill_results(request, put_status)
                    cast(BurstCallback, request.on_results)(
                        cast(list[PutMessageResult], request.results)
                    )
                except Exception:
                    log.exception("put_callback_failed", status=put_status.name)
