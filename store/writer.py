"""The store's single writer (RocketMQ: the checks of `DefaultMessageStore.asyncPutMessage`, then
what `CommitLog.asyncPutMessage` does under the put lock, with `DefaultAppendMessageCallback`).

`CommitLogWriter`: a submission's way in (its checks in `put_checks`, its encoding, one
`PutRequest` on the `WriterQueue` of `put_queue`), the only task that appends to the commit
log's segments, and the delivery of outcomes. The writer takes everything queued as one group
(up to `max_group_size` requests), appends each request's batches in one pass through
`CommitLog.put`, tells the consume side what it appended, answers ASYNC requests at once and
hands SYNC ones to the group commit, then wakes the flush services once per group. Requests
submitted with a callback (a receive burst of sends) get their outcomes from a separate task,
one callback per request, so the writer and the flush service go straight back to work. Knows
nothing of sockets or request codes; every outcome is a `PutMessageStatus`, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

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
from store.put_queue import BurstCallback, PutCallback, PutRequest, WriterQueue
from store.status import AppendMessageStatus, PutMessageStatus, RunningFlags

log = structlog.get_logger()

#: records a finished put (counters, slow puts) and returns it: `StoreStats.finish`
Finish = Callable[[PutMessageResult, int, float], PutMessageResult]
#: the writer appended a batch: (batch, where it starts, its first queue offset)
AppendedHook = Callable[[EncodedBatch, int, int], None]


class CommitLogWriter:
    """The put's way in (`put`, `submit_burst`), the writer task (`run`) and the outcome
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
        to_transfer: Callable[[PutRequest], None] | None = None,
        after_appends: Callable[[], None],
        finish: Finish,
    ) -> None:
        self.config = config
        self.commit_log = commit_log
        self.running_flags = running_flags
        self.now_ms = now_ms
        self.sync_flush = sync_flush
        self.to_group_commit = to_group_commit
        #: SYNC_MASTER: where puts that wait go to wait for a slave (after any flush)
        self.to_transfer = to_transfer
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
        room = config.put_queue_capacity - len(queue)  # puts past it are refused one by one
        now_ms = self.now_ms()
        for position, msgs in enumerate(puts):
            own = problem
            if own is None:
                as_batch = len(msgs) != 1 if batch is None else batch
                max_size = config.max_message_size
                own = check_batch(msgs, max_size) if as_batch else check_message(msgs[0])
            if own is None:
                encoded = encode_batch(msgs, now_ms, config.max_message_size)
                if encoded is AppendMessageStatus.PROPERTIES_SIZE_EXCEEDED:
                    own = PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
                elif isinstance(encoded, AppendMessageStatus):
                    own = PutMessageStatus.MESSAGE_ILLEGAL
                elif len(request.batches) >= room:
                    own = PutMessageStatus.WRITER_QUEUE_FULL
                else:
                    request.batches.append(encoded)
                    request.positions.append(position)
                    request.wait_flush = request.wait_flush or msgs[0].wait_store_msg_ok
                    continue
            results[position] = self.finish(PutMessageResult(own), 0, started)
        if request.batches:
            request.wait_replica = request.wait_flush and self.to_transfer is not None
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
        positions = request.positions
        finish = self.finish
        count = len(appended)
        put_ok = AppendMessageStatus.PUT_OK
        for part, batch in enumerate(request.batches):
            where = appended[part] if part < count else put_status
            if not isinstance(where, Appended):
                results[positions[part]] = finish(PutMessageResult(where), 0, started)
                continue
            host = batch.store_host_bytes
            base = where.wrote_offset
            records = batch.records
            size = len(batch.data)
            # Positional, in the field order (status ... msg_num): cheaper than keywords.
            append_result = AppendMessageResult(
                put_ok,
                base,
                size,
                (offset_msg_id(host, base),)
                if len(records) == 1
                else tuple(offset_msg_id(host, base + start) for start, _ in records),
                where.store_timestamp,
                where.logics_offset,
                len(records),
            )
            results[positions[part]] = finish(
                PutMessageResult(put_status, append_result), size, started
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
        try_put = self.commit_log.try_put
        for index, request in enumerate(group):
            queue.next = index + 1
            if request.cancelled or request.done:
                continue  # the caller gave up, or it was answered busy: never append it
            appended = request.appended
            end = -1
            for batch in request.batches:
                result = try_put(batch, now_ms) or await put(batch, now_ms)
                appended.append(result)
                if isinstance(result, Appended):
                    end = result.wrote_offset + len(batch.data)
                    if on_appended is not None:
                        on_appended(batch, result.wrote_offset, result.logics_offset)
            if end < 0:
                request.complete(cast(PutMessageStatus, appended[-1]))  # each has its status
                continue
            appended_any = True
            if request.wait_flush or request.wait_replica:
                request.end_offset = end
                request.deadline = trio.current_time() + timeout_s
                if request.wait_flush:
                    self.to_group_commit(request)
                else:
                    cast(Callable[[PutRequest], None], self.to_transfer)(request)
            else:
                request.complete(PutMessageStatus.PUT_OK)
        if appended_any:
            self.after_appends()

    # --- outcomes of submitted puts -----------------------------------------------------------

    async def deliver_outcomes(self) -> None:
        """Run the callbacks of `submit_burst` requests, a batch per wake-up."""
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
