"""`RebalanceLockManager`: which client of a consumer group owns a queue, for orderly consumers.

An orderly consumer consumes a queue only while it holds the queue's lock here, so two clients
of one group never consume one queue at once. A lock is keyed by (group, topic, broker name,
queue id) and held by one client id; the holder renews it with every LOCK_BATCH_MQ (clients do
so every 20 s) and it expires `rebalance_lock_max_live_time` after the last renewal, when any
client of the group may take it: a consumer that died releases its queues that way. UNLOCK_BATCH_MQ
releases the caller's own locks only. As 4.9's `RebalanceLockManager`, without its mutex (one
Trio thread).

Unlike 4.9 the table cannot be grown by peers: only queues that exist on this broker (its name,
a known topic, a queue id below the topic's read queues) of a known group are locked, and
`expire` (the consumer housekeeping, every 10 s) drops the expired entries, so the table holds
at most the live locks of existing queues.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog

from protocol.lock_body import MessageQueue

log = structlog.get_logger()


@dataclass(slots=True)
class LockEntry:
    client_id: str
    last_update: float


class RebalanceLockManager:
    def __init__(self, max_live_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.max_live_s = max_live_s
        self._clock = clock
        self._table: dict[str, dict[MessageQueue, LockEntry]] = {}

    def try_lock_batch(
        self, group: str, queues: Iterable[MessageQueue], client_id: str
    ) -> list[MessageQueue]:
        """Lock or renew each queue for `client_id` where nobody else holds a live lock; the
        queues `client_id` holds afterwards, of those asked for."""
        now = self._clock()
        locks = self._table.setdefault(group, {})
        held: list[MessageQueue] = []
        for mq in queues:
            entry = locks.get(mq)
            if entry is None:
                locks[mq] = LockEntry(client_id, now)
                log.info("queue_locked", group=group, queue=_name(mq), client_id=client_id)
            elif entry.client_id == client_id:
                entry.last_update = now
            elif now - entry.last_update > self.max_live_s:
                log.warning(
                    "queue_lock_taken_over",
                    group=group,
                    queue=_name(mq),
                    client_id=client_id,
                    expired_holder=entry.client_id,
                )
                entry.client_id, entry.last_update = client_id, now
            else:
                continue  # held by another live client
            held.append(mq)
        if not locks:
            del self._table[group]
        return held

    def unlock_batch(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> int:
        """Release the queues `client_id` holds among `queues`; how many were released."""
        locks = self._table.get(group)
        if locks is None:
            return 0
        released = 0
        for mq in queues:
            entry = locks.get(mq)
            if entry is not None and entry.client_id == client_id:
                del locks[mq]
                released += 1
                log.info("queue_unlocked", group=group, queue=_name(mq), client_id=client_id)
        if not locks:
            del self._table[group]
        return released

    def holder(self, group: str, mq: MessageQueue) -> str | None:
        """The client holding a live lock on `mq` for `group`, or None."""
        entry = self._table.get(group, {}).get(mq)
        if entry is None or self._clock() - entry.last_update > self.max_live_s:
            return None
        return entry.client_id

    def expire(self) -> int:
        """Drop the expired locks; how many."""
        cutoff = self._clock() - self.max_live_s
        dropped = 0
        for group in list(self._table):
            locks = self._table[group]
            for mq in [mq for mq, entry in locks.items() if entry.last_update < cutoff]:
                del locks[mq]
                dropped += 1
            if not locks:
                del self._table[group]
        return dropped

    @property
    def lock_count(self) -> int:
        return sum(len(locks) for locks in self._table.values())


def _name(mq: MessageQueue) -> str:
    return f"{mq.topic}:{mq.broker_name}:{mq.queue_id}"
