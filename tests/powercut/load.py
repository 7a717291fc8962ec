"""Load for the power-cut tests: producers on several connections send until the broker dies
under them, and remember exactly what was acknowledged (`tests.reliability.acks.Ack`)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import trio

from protocol.msgid import decode_offset_msg_id
from rmq_client.producer import ConnectionClosedError, Message, SendError, SendStatus, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from tests.reliability.acks import Ack

TOPICS = ("CutA", "CutB")
#: queues of a topic a producer creates (the client's default of 4)
QUEUES = 4


@dataclass(slots=True)
class LoadResult:
    #: sends that failed because the broker was killed under them
    cut_short: int = 0
    #: stored but not confirmed durable (FLUSH_DISK_TIMEOUT): not acknowledged
    not_durable: int = 0


async def produce_then_kill(
    port: int,
    acks: dict[int, Ack],
    *,
    producers: int,
    tag: str,
    rng: random.Random,
    seconds: float,
    kill: Callable[[], None],
    group: str | None = None,
) -> LoadResult:
    """Send from `producers` connections for `seconds`, then `kill()` the broker under them;
    record every SEND_OK in `acks`. A send that fails once the broker is being killed is what a
    power cut does to a client; a failure before that is not expected and is raised. With a
    `group`, a consumer pulls TOPICS[0] meanwhile and commits what it read."""
    result = LoadResult()
    killed = False

    async def consumer(name: str) -> None:
        try:
            async with open_pull_consumer("127.0.0.1", port, name, timeout_s=30) as client:
                await trio.sleep(0.2)  # the producers create the topic
                await client.subscribe(TOPICS[0])
                offsets = [await client.committed(TOPICS[0], q) or 0 for q in range(QUEUES)]
                while True:
                    for queue_id in range(QUEUES):
                        pulled = await client.pull(TOPICS[0], queue_id, offsets[queue_id])
                        offsets[queue_id] = pulled.next_begin_offset
                        await client.commit(TOPICS[0], queue_id, offsets[queue_id])
                    await trio.sleep(0.01)
        except* (ConnectionClosedError, SendError, OSError, trio.BrokenResourceError) as errors:
            if not killed:
                raise errors

    async def producer(index: int) -> None:
        try:
            async with open_producer("127.0.0.1", port, timeout_s=30) as client:
                for seq in range(10_000_000):
                    topic = TOPICS[(index + seq) % len(TOPICS)]
                    body = f"{tag}-p{index}-s{seq}-".encode() * rng.randint(1, 40)
                    sent = await client.send(Message(topic, body))
                    if sent.status is not SendStatus.SEND_OK:
                        assert sent.status is SendStatus.FLUSH_DISK_TIMEOUT, sent
                        result.not_durable += 1
                        continue
                    offset = decode_offset_msg_id(sent.offset_msg_id)[2]
                    assert offset not in acks, f"offset {offset} acknowledged twice"
                    acks[offset] = Ack(offset, topic, sent.queue_id, sent.queue_offset, body)
        except* (ConnectionClosedError, SendError, OSError, trio.BrokenResourceError) as errors:
            if not killed:
                raise errors
            result.cut_short += 1

    async with trio.open_nursery() as nursery:
        for index in range(producers):
            nursery.start_soon(producer, index)
        if group is not None:
            nursery.start_soon(consumer, group)
        await trio.sleep(seconds)
        killed = True
        kill()
    return result
