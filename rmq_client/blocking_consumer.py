"""`BlockingConsumer`: receive messages from plain threads, for tests and scripts without Trio.

    with BlockingConsumer("127.0.0.1", 10911, "my-group") as consumer:
        messages = consumer.receive("Orders", count=3, timeout_s=10)

A helper thread runs a Trio loop holding one pull-consumer connection. `receive` long-polls every
queue of the topic at once until `count` messages have arrived, then commits to the broker the
offsets of what it returned, so another consumer of the group (or this one after a restart)
resumes after them. Messages that arrive beyond `count` are kept for the next call and not
committed yet, never dropped; too few in time raise `TimeoutError` and are kept as well. A group
starts at the offsets it has committed, else at the start of each queue. Messages come as
`rmq_client.ReceivedMessage`, as the push consumer's handler sees them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import trio

from protocol.codes import ResponseCode
from rmq_client.blocking import LoopThread
from rmq_client.producer import SendError
from rmq_client.pull_consumer import PullConsumer, open_pull_consumer
from rmq_client.push_consumer import ReceivedMessage, received

__all__ = ["BlockingConsumer"]

#: how long the broker holds one pull while the queue is empty
SUSPEND_MS: Final = 2_000
#: between two route look-ups while the topic does not exist yet (nothing was sent to it)
ROUTE_RETRY_S: Final = 0.05


@dataclass(frozen=True, slots=True)
class _Round:
    """One `receive`: what it waits for, and the list every queue's poller adds to."""

    topic: str
    expression: str
    got: list[ReceivedMessage]
    count: int
    nursery: trio.Nursery


class BlockingConsumer(LoopThread[PullConsumer]):
    """A consumer group member for code without Trio: a helper thread runs the connection."""

    def __init__(
        self, host: str, port: int, group: str, *, client_id: str | None = None, **kwargs: Any
    ) -> None:
        self.group = group
        #: next offset to pull, per (topic, queue id)
        self._offsets: dict[tuple[str, int], int] = {}
        self._pending: dict[str, list[ReceivedMessage]] = {}
        self._queues: dict[str, list[int]] = {}
        client_id = client_id or f"python-blocking@{id(self)}"
        super().__init__(
            partial(open_pull_consumer, host, port, group, client_id=client_id, **kwargs)
        )

    def receive(
        self, topic: str, count: int = 1, *, expression: str = "*", timeout_s: float = 10.0
    ) -> list[ReceivedMessage]:
        """The next `count` messages of `topic` (matching the tag `expression`), in each queue's
        order; `TimeoutError` if fewer arrived within `timeout_s`."""
        if count < 1:
            raise ValueError(f"count must be at least 1, got {count}")
        return self._call(self._receive, topic, count, expression, timeout_s)

    async def _receive(
        self, topic: str, count: int, expression: str, timeout_s: float
    ) -> list[ReceivedMessage]:
        consumer = self.connection
        got = self._pending.pop(topic, [])
        with trio.move_on_after(timeout_s):
            if consumer.subscriptions.get(topic) != expression:
                await consumer.subscribe(topic, expression)
            await self._known_queues(consumer, topic)
            if len(got) < count:
                async with trio.open_nursery() as nursery:
                    wanted = _Round(topic, expression, got, count, nursery)
                    for queue_id in self._queues[topic]:
                        nursery.start_soon(self._poll, consumer, wanted, queue_id)
        delivered, kept = (got[:count], got[count:]) if len(got) >= count else ([], got)
        self._pending[topic] = kept
        await self._commit(consumer, topic, kept)
        if not delivered:
            raise TimeoutError(
                f"{len(got)} of {count} messages of {topic} arrived within {timeout_s:g} s"
            )
        return delivered

    async def _commit(
        self, consumer: PullConsumer, topic: str, kept: list[ReceivedMessage]
    ) -> None:
        """Commit up to what was delivered: a message kept for later is not committed yet."""
        for queue_id in self._queues.get(topic, []):
            offset = self._offsets.get((topic, queue_id))
            held = [m.queue_offset for m in kept if m.queue_id == queue_id]
            if held:
                offset = min(held)
            if offset is not None:
                await consumer.commit(topic, queue_id, offset)

    async def _known_queues(self, consumer: PullConsumer, topic: str) -> None:
        """Learn the topic's queues once; wait while the topic does not exist yet."""
        while topic not in self._queues:
            try:
                route = await consumer.connection.get_route(topic)
            except SendError as exc:
                if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                    raise
                await trio.sleep(ROUTE_RETRY_S)
                continue
            self._queues[topic] = [
                q for data in route.queue_datas for q in range(data.read_queue_nums)
            ]

    async def _poll(self, consumer: PullConsumer, wanted: _Round, queue_id: int) -> None:
        topic, got = wanted.topic, wanted.got
        key = (topic, queue_id)
        if key not in self._offsets:
            committed = await consumer.committed(topic, queue_id)
            if committed is None:
                committed = await consumer.min_offset(topic, queue_id)
            self._offsets.setdefault(key, committed)
        while len(got) < wanted.count:
            result = await consumer.pull(
                topic,
                queue_id,
                self._offsets[key],
                expression=wanted.expression,
                suspend_ms=SUSPEND_MS,
            )
            # No await between the answer and taking it: a cancel cannot lose a batch.
            got.extend(received(record) for record in result.records)
            if result.code != ResponseCode.PULL_NOT_FOUND or result.records:
                self._offsets[key] = result.next_begin_offset
        wanted.nursery.cancel_scope.cancel()
