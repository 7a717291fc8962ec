"""`ParkingSpot`: one task sleeps until another wakes it, with no Event object per wait.

The writer loops of the store and of each connection park here when they have nothing to do;
whoever queues work calls `wake()`, which costs nothing when no task is parked.
"""

from __future__ import annotations

import trio


class ParkingSpot:
    """At most one parked task; `wake()` reschedules it, `park()` returns when woken."""

    __slots__ = ("_task",)

    def __init__(self) -> None:
        self._task: trio.lowlevel.Task | None = None

    async def park(self) -> None:
        self._task = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._cancelled)

    def wake(self) -> None:
        task = self._task
        if task is not None:
            self._task = None
            trio.lowlevel.reschedule(task)

    def _cancelled(self, _raise_cancel: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        self._task = None
        return trio.lowlevel.Abort.SUCCEEDED
