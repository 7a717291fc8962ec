"""The puts on their way to the store's writer: `PutRequest` (the puts of one submission
travelling writer -> group commit -> caller) and `WriterQueue` (the requests waiting, the group
being appended, and the busy answer for puts stuck behind a slow writer).

`WriterQueue` uses a deque and one parked task instead of a memory channel, so a request costs
an append and at most one reschedule. `group[next:]` are requests the writer has taken but not
started to append; with the deque they are the ones that may still be answered busy when they
have waited longer than `os_page_cache_busy_timeout_ms` (RocketMQ's PCBUSY_CLEAN_QUEUE): such a
request is completed OS_PAGE_CACHE_BUSY and the writer skips it, so it is answered busy or
stored, never both. Its length counts puts (a request holds one per batch), which is what
`put_queue_capacity` bounds.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import cast

import outcome
import structlog
import trio

from store.commit_log import Appended
from store.encode import EncodedBatch
from store.message import PutMessageResult
from store.parking import ParkingSpot
from store.status import PutMessageStatus

log = structlog.get_logger()

#: receives the outcomes of a submitted burst, in submission order, in the store's task; it must
#: not block or raise
BurstCallback = Callable[[list[PutMessageResult]], None]
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
        "wait_replica",
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
        #: SYNC_MASTER: answered only once a slave has this put (after the flush, if any)
        self.wait_replica = False
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
        self._puts = 0
        self._spot = ParkingSpot()
        self.closed = False
        #: the group being appended and the index of its next put
        self.group: list[PutRequest] = []
        self.next = 0
        #: when the writer started its current group (None between groups)
        self.busy_since: float | None = None

    def __len__(self) -> int:
        """The puts waiting (a request holds one per batch it carries)."""
        return self._puts

    def put(self, request: PutRequest) -> None:
        self._waiting.append(request)
        self._puts += len(request.batches)
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
        self._puts -= sum(len(request.batches) for request in self.group)
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
            self._puts -= len(request.batches)
            if not (request.done or request.cancelled):
                answered += 1
                request.complete(busy)
        if answered:
            log.warning("stale_puts_answered_busy", puts=answered, queued=len(waiting))
        return answered
