"""`BlockingConsumer`: receive messages from plain threads, for tests and scripts without Trio.

    with BlockingConsumer("127.0.0.1", 10911, "my-group") as consumer:
        messages = consumer.receive("Orders", count=3, timeout_s=10)

A helper thread runs a Trio loop holding one pull-consumer connection. `receive` long-polls every
queue of the topic at once until `count` messages have arrived, then commits to the broker the
offsets of what it returned, so another consumer of the group (or this one after a restart)
resumes after them. Messages that arrive beyond `count` are kept for the next call and not
committed yet, never dropped; too few in time raise `TimeoutError` and are kept as well. A group
starts at the offsets it has committed, else at the start of each queue.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import trio

from broker.client import SendError
from broker.pull_client import PullConsumer, open_pull_consumer
from protocol.codes import ResponseCode
from protocol.properties import MessageConst, decode_properties
from store.decode import CommitLogRecord

__all__ = ["BlockingConsumer", "ReceivedMessage"]

#: how long the broker holds one pull while the queue is empty
SUSPEND_MS: Final = 2_000
#: between two route look-ups while the topic does not exist yet (nothing was sent to it)
ROUTE_RETRY_S: Final = 0.05
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    topic: str
    body: bytes
    tags: str | None
    keys: str | None
    properties: dict[str, str]
    queue_id: int
    queue_offset: int

    @classmethod
    def of(cls, record: CommitLogRecord) -> ReceivedMessage:
        properties = decode_properties(record.properties)
        return cls(
            record.topic,
            record.body or b"",
            properties.get(MessageConst.TAGS),
            properties.get(MessageConst.KEYS),
            properties,
            record.queue_id,
            record.queue_offset,
        )


@dataclass(frozen=True, slots=True)
class _Round:
    """One `receive`: what it waits for, and the list every queue's poller adds to."""

    topic: str
    expression: str
    got: list[ReceivedMessage]
    count: int
    nursery: trio.Nursery


class BlockingConsumer:
    """A consumer group member for code without Trio: a helper thread runs the connection."""

    def __init__(
        self, host: str, port: int, group: str, *, client_id: str | None = None, **kwargs: Any
    ) -> None:
        self.group = group
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._consumer: PullConsumer | None = None
        #: next offset to pull, per (topic, queue id)
        self._offsets: dict[tuple[str, int], int] = {}
        self._pending: dict[str, list[ReceivedMessage]] = {}
        self._queues: dict[str, list[int]] = {}
        kwargs.setdefault("client_id", client_id or f"python-blocking@{id(self)}")
        self._thread = threading.Thread(
            target=trio.run, args=(self._main, host, port, kwargs), daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    async def _main(self, host: str, port: int, kwargs: dict[str, Any]) -> None:
        try:
            async with open_pull_consumer(host, port, self.group, **kwargs) as consumer:
                self._consumer = consumer
                self._stop = trio.Event()
                self._token = trio.lowlevel.current_trio_token()
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    def _call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        if not self._thread.is_alive():
            raise RuntimeError("the consumer is closed")
        return trio.from_thread.run(fn, *args, trio_token=self._token)

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
        consumer = self._consumer
        assert consumer is not None
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
            got.extend(ReceivedMessage.of(record) for record in result.records)
            if result.code != ResponseCode.PULL_NOT_FOUND or result.records:
                self._offsets[key] = result.next_begin_offset
        wanted.nursery.cancel_scope.cancel()

    def close(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join()

    def __enter__(self) -> BlockingConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
