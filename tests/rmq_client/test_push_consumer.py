"""The push consumer against a real broker process: each message handled once and its offset
committed after the handler; tag filters; a failing handler's message retried through the
group's retry topic; a stop that lets the running handler finish, commits, and hands the rest to
the next consumer of the group."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio
import trio.testing

from rmq_client import Message, ReceivedMessage, open_producer, open_push_consumer
from rmq_client.pull_consumer import open_pull_consumer
from tests.daemon import Daemon

HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    running = Daemon(tmp_path_factory.mktemp("push") / "store")
    yield running
    running.stop()


class Seen:
    """A handler that records what it is given; `until(n)` waits for the n-th message."""

    def __init__(self) -> None:
        self.messages: list[ReceivedMessage] = []
        self._more = trio.Event()

    async def handle(self, message: ReceivedMessage) -> None:
        self.messages.append(message)
        self._more.set()
        self._more = trio.Event()

    async def until(self, count: int) -> None:
        with trio.fail_after(30):
            while len(self.messages) < count:
                await self._more.wait()

    @property
    def bodies(self) -> list[bytes]:
        return [m.body for m in self.messages]


async def send(port: int, *messages: Message) -> None:
    async with open_producer(HOST, port) as producer:
        for message in messages:
            await producer.send(message)


async def committed_total(port: int, group: str, topic: str) -> int:
    async with open_pull_consumer(HOST, port, group) as puller:
        return sum([await puller.committed(topic, q) or 0 for q in range(4)])


async def test_each_message_is_handled_once_and_committed(daemon: Daemon) -> None:
    bodies = [f"m{i}".encode() for i in range(20)]
    await send(daemon.port, *(Message("PushAll", b) for b in bodies))
    seen = Seen()
    async with open_push_consumer(HOST, daemon.port, "push-all", seen.handle) as consumer:
        await consumer.subscribe("PushAll")
        await seen.until(len(bodies))
        # a message sent while the queues are long-polled is handed over too
        await send(daemon.port, Message("PushAll", b"late", queue_id=2))
        await seen.until(len(bodies) + 1)
    assert sorted(seen.bodies) == sorted([*bodies, b"late"])
    assert {m.topic for m in seen.messages} == {"PushAll"}
    for queue_id in range(4):  # in order within a queue
        offsets = [m.queue_offset for m in seen.messages if m.queue_id == queue_id]
        assert offsets == list(range(len(offsets)))
    assert await committed_total(daemon.port, "push-all", "PushAll") == len(bodies) + 1


async def test_only_the_subscribed_tags_reach_the_handler(daemon: Daemon) -> None:
    tags = ["A", "B", "C", "A", "B", "A"]
    await send(daemon.port, *(Message("PushTags", t.encode(), tags=t, queue_id=0) for t in tags))
    seen = Seen()
    async with open_push_consumer(HOST, daemon.port, "push-tags", seen.handle) as consumer:
        await consumer.subscribe("PushTags", "A || C")
        await seen.until(4)
        await send(daemon.port, Message("PushTags", b"end", tags="C", queue_id=0))
        await seen.until(5)
    assert [m.tags for m in seen.messages] == ["A", "C", "A", "A", "C"]
    # the B messages are committed past too
    assert await committed_total(daemon.port, "push-tags", "PushTags") == len(tags) + 1


async def test_a_failed_message_comes_back_with_its_topic_and_one_more_try(
    daemon: Daemon,
) -> None:
    await send(daemon.port, *(Message("PushFail", f"{i}".encode(), queue_id=0) for i in range(3)))
    seen = Seen()

    async def handle(message: ReceivedMessage) -> None:
        await seen.handle(message)
        if message.body == b"1" and message.reconsume_times == 0:
            raise ValueError("not yet")

    async with open_push_consumer(
        HOST, daemon.port, "push-fail", handle, retry_delay_level=1
    ) as consumer:
        await consumer.subscribe("PushFail")
        await seen.until(4)
    assert [(m.body, m.reconsume_times) for m in seen.messages] == [
        (b"0", 0),
        (b"1", 0),
        (b"2", 0),
        (b"1", 1),
    ]
    again = seen.messages[-1]
    assert again.topic == "PushFail"
    assert again.record.topic == "%RETRY%push-fail"
    assert again.msg_id == seen.messages[1].msg_id
    assert await committed_total(daemon.port, "push-fail", "PushFail") == 3


async def test_stop_lets_the_running_handler_finish_and_the_next_consumer_goes_on(
    daemon: Daemon,
) -> None:
    total = 10
    await send(daemon.port, *(Message("PushStop", b"%d" % i, queue_id=0) for i in range(total)))
    first = Seen()
    release = trio.Event()

    async def slow(message: ReceivedMessage) -> None:
        await first.handle(message)
        if len(first.messages) == 3:
            await release.wait()

    stopped = trio.Event()
    async with (
        open_push_consumer(HOST, daemon.port, "push-stop", slow) as consumer,
        trio.open_nursery() as nursery,
    ):
        await consumer.subscribe("PushStop")
        await first.until(3)

        async def stop() -> None:
            await consumer.stop()
            stopped.set()

        nursery.start_soon(stop)
        await trio.testing.wait_all_tasks_blocked()
        assert not stopped.is_set()  # the third handler is still running
        release.set()
        with trio.fail_after(30):
            await stopped.wait()
    assert first.bodies == [b"0", b"1", b"2"]
    assert await committed_total(daemon.port, "push-stop", "PushStop") == 3

    rest = Seen()
    async with open_push_consumer(HOST, daemon.port, "push-stop", rest.handle) as consumer:
        await consumer.subscribe("PushStop")
        await rest.until(total - 3)
    assert first.bodies + rest.bodies == [b"%d" % i for i in range(total)]
    assert await committed_total(daemon.port, "push-stop", "PushStop") == total


async def test_a_stopped_consumer_refuses_a_subscription(daemon: Daemon) -> None:
    seen = Seen()
    async with open_push_consumer(HOST, daemon.port, "push-late", seen.handle) as consumer:
        await consumer.stop()
        with pytest.raises(RuntimeError, match="stopped"):
            await consumer.subscribe("PushLate")
