"""`WriterQueue`: the puts waiting for the store's single writer, and the group it is appending.

A deque and one parked task instead of a memory channel, so a put costs an append and at most
one reschedule. The writer takes everything waiting (up to `max_group_size`) as one group;
`group[next:]` are puts it has taken but not started to append. Together with the deque they
are the puts that may still be answered busy when they have waited longer than
`os_page_cache_busy_timeout_ms` (RocketMQ's PCBUSY_CLEAN_QUEUE): such a put is completed
OS_PAGE_CACHE_BUSY and the writer skips it, so it is either answered busy or stored, never both.
"""

from __future__ import annotations

import collections

import structlog
import trio

from store.flush import PutRequest
from store.parking import ParkingSpot
from store.status import PutMessageStatus

log = structlog.get_logger()


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
