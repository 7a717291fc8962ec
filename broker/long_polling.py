"""`PullWaiters`: pulls suspended until their queue has a new message (long polling).

RocketMQ's `PullRequestHoldService` checks held pulls every few seconds and on each message
arrival. Here a suspended pull waits on one `trio.Event` per (topic, queue id); the store's
dispatcher calls `on_arrival` for every queue it adds units to, which wakes every pull waiting
on that queue at once. No thread, no timer loop per pull: a suspended pull costs one Event
entry shared by all waiters of its queue and its own cancel scope. At most `max_waiters` pulls
are suspended at a time; beyond that a pull is answered at once (its client simply pulls again).
At shutdown `release_all` answers every held pull at once, so a drain does not wait out the holds.
"""

from __future__ import annotations

from typing import Final

import trio

DEFAULT_MAX_WAITERS: Final = 10_000


class PullWaiters:
    def __init__(self, max_waiters: int = DEFAULT_MAX_WAITERS) -> None:
        self.max_waiters = max_waiters
        self.waiting = 0
        self.released = False
        self._events: dict[tuple[str, int], trio.Event] = {}
        self._counts: dict[tuple[str, int], int] = {}

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's dispatch listener: `topic`/`queue_id` now ends at `max_offset`."""
        event = self._events.pop((topic, queue_id), None)
        if event is not None:
            event.set()

    def release_all(self) -> None:
        """Wake every suspended pull and suspend no more (the broker is shutting down)."""
        self.released = True
        for event in self._events.values():
            event.set()
        self._events.clear()

    async def wait(self, topic: str, queue_id: int, timeout_s: float) -> bool:
        """Suspend until a message arrives on the queue or `timeout_s` passes; True if one
        arrived. False at once when too many pulls are suspended already. The caller reads the
        queue and calls this without a checkpoint between, so no arrival can fall in the gap."""
        if self.released or self.waiting >= self.max_waiters or timeout_s <= 0:
            return False
        key = (topic, queue_id)
        event = self._events.get(key)
        if event is None:
            event = self._events[key] = trio.Event()
        self.waiting += 1
        self._counts[key] = self._counts.get(key, 0) + 1
        try:
            with trio.move_on_after(timeout_s):
                await event.wait()
                return True
            return False
        finally:
            self.waiting -= 1
            left = self._counts[key] - 1
            if left:
                self._counts[key] = left
            else:
                del self._counts[key]
                if self._events.get(key) is event:
                    del self._events[key]  # the last waiter gave up: no stale entry
