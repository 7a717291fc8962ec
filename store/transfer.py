"""SYNC_MASTER's wait for a slave (RocketMQ 4.9 `CommitLog.handleHA` and
`HAService.GroupTransferService`).

A put under SYNC_MASTER that asked to wait (WAIT, `wait_store_msg_ok`) is answered PUT_OK only
once a slave has reported an offset at or past the put's end; FLUSH_SLAVE_TIMEOUT when none has
by the put's deadline (`sync_flush_timeout_ms` after its append); SLAVE_NOT_AVAILABLE at once
when no slave is connected or the best one is `ha_slave_fallbehind_max` bytes or more behind the
put's end. The record stays in the master's log whatever the answer, as in 4.9.

Knows offsets only: the broker's HA connections tell it how many slaves are connected and what
they reported (`slave_connected`, `slave_disconnected`, `notify_transfer_some`).
"""

from __future__ import annotations

import collections

import trio

from store.put_queue import PutRequest
from store.status import PutMessageStatus


class GroupTransferService:
    def __init__(self, fallbehind_max: int) -> None:
        self.fallbehind_max = fallbehind_max
        #: the furthest offset any slave has reported (4.9's push2SlaveMaxOffset)
        self.push_to_slave_max_offset = 0
        self.connections = 0
        #: puts waiting for a slave, in end-offset order
        self.pending: collections.deque[PutRequest] = collections.deque()
        self._added = trio.Event()

    def slave_ok(self, end_offset: int) -> bool:
        """A slave is connected and less than `fallbehind_max` bytes behind `end_offset`."""
        return (
            self.connections > 0
            and end_offset - self.push_to_slave_max_offset < self.fallbehind_max
        )

    def put_request(self, request: PutRequest) -> None:
        """Wait for a slave to pass `request.end_offset`, or answer at once."""
        if not self.slave_ok(request.end_offset):
            request.complete(PutMessageStatus.SLAVE_NOT_AVAILABLE)
        elif request.end_offset <= self.push_to_slave_max_offset:
            request.complete(PutMessageStatus.PUT_OK)
        else:
            self.pending.append(request)
            self._added.set()

    def slave_connected(self) -> None:
        self.connections += 1

    def slave_disconnected(self) -> None:
        self.connections -= 1

    def notify_transfer_some(self, offset: int) -> None:
        """A slave reported `offset`: every put ending at or below it is answered PUT_OK."""
        if offset <= self.push_to_slave_max_offset:
            return
        self.push_to_slave_max_offset = offset
        pending = self.pending
        while pending and pending[0].end_offset <= offset:
            pending.popleft().complete(PutMessageStatus.PUT_OK)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Answer FLUSH_SLAVE_TIMEOUT to every put still waiting at its deadline."""
        task_status.started()
        pending = self.pending
        while True:
            if not pending:
                self._added = trio.Event()
                await self._added.wait()
                continue
            await trio.sleep_until(pending[0].deadline)
            now = trio.current_time()
            while pending and pending[0].deadline <= now:
                pending.popleft().complete(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)

    def shutdown(self) -> None:
        """The store closes: no slave will be heard from; every waiting put times out."""
        while self.pending:
            self.pending.popleft().complete(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
