"""The remoting side of bench/grpc_vs_remoting.py, in the shape of the gRPC side's runs.

Sends: bench/_loadgen.py's generator on one socket (SEND_MESSAGE_V2 frames encoded before the
clock starts, `window` pipelined). Receives, of a topic preloaded by `preload`: rmq_client's
pull consumer (PULL_MESSAGE of `batch`, then UPDATE_CONSUMER_OFFSET of the next offset, tasks
on one connection taking a queue each), and for reference the 4.x pop (bench/pop.py's loop:
POP_MESSAGE of `batch`, one ACK_MESSAGE per message, one task per queue on one connection).
Each returns the gRPC side's `Outcome`; a message missing, twice or uncommitted fails the run.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable
from typing import Final

import trio

from bench._grpc_client import Outcome
from bench._loadgen import QUEUES, Load, Share, Target
from bench.pop import pop_queue
from rmq_client.producer import Message, Producer, open_producer
from rmq_client.pull_consumer import open_pull_consumer

#: sends in flight while a topic is preloaded
_PRELOAD_TASKS: Final = 16


def sender(target: Target, load: Load) -> Callable[[], Outcome]:
    """One run of the load generator on connection 0 (queue 0): connected and its frames
    encoded now, sending when called."""
    share = Share(target, load, [0])

    def run() -> Outcome:
        result = share.run(time.monotonic())
        latencies = array("d")
        latencies.frombytes(result.latencies_us)
        out = Outcome(result.acked, result.replies, result.failed, result.first_failure)
        out.latencies_s = sorted(us / 1e6 for us in latencies)
        out.seconds = load.duration_s
        if result.unanswered:
            out.fail(f"{result.unanswered} requests unanswered")
        return out

    return run


async def preload(port: int, topic: str, messages: int, body_size: int) -> None:
    """`messages` messages of `body_size` bytes into `topic`'s queues 0..QUEUES-1."""
    payload = b"r" * body_size

    async def sender(producer: Producer, queue_id: int, count: int) -> None:
        for _ in range(count):
            await producer.send(Message(topic, payload, queue_id=queue_id))

    async with open_producer("127.0.0.1", port) as producer, trio.open_nursery() as nursery:
        for task in range(_PRELOAD_TASKS):
            count = messages // _PRELOAD_TASKS + (task < messages % _PRELOAD_TASKS)
            nursery.start_soon(sender, producer, task % QUEUES, count)


async def pull_drain(
    port: int,
    group: str,
    topic: str,
    expected: int,
    *,
    receivers: int,
    batch: int,
    timeout_s: float,
) -> Outcome:
    """Pull every queue of `topic` from offset 0 to its end, committing after each pull;
    latencies are the pulls'."""
    out = Outcome()
    seen: set[tuple[int, int]] = set()
    async with open_pull_consumer("127.0.0.1", port, group, client_id=f"{group}@0") as consumer:
        await consumer.subscribe(topic)
        ends = [await consumer.max_offset(topic, q) for q in range(QUEUES)]
        todo = list(range(QUEUES))
        started = time.monotonic()

        async def receiver() -> None:
            while todo:
                queue_id = todo.pop()
                offset = 0
                while offset < ends[queue_id]:
                    call_started = time.monotonic()
                    result = await consumer.pull(topic, queue_id, offset, max_nums=batch)
                    out.latencies_s.append(time.monotonic() - call_started)
                    keys = {(queue_id, record.queue_offset) for record in result.records}
                    if keys & seen or len(keys) != len(result.records) or not keys:
                        out.fail(f"pull of queue {queue_id} at {offset}: {result.code}")
                        return
                    seen.update(keys)
                    out.replies += len(keys)
                    offset = result.next_begin_offset
                    await consumer.commit(topic, queue_id, offset)

        with trio.fail_after(timeout_s):
            async with trio.open_nursery() as nursery:
                for _ in range(receivers):
                    nursery.start_soon(receiver)
        out.seconds = time.monotonic() - started
        committed = [await consumer.committed(topic, q) for q in range(QUEUES)]
        if committed != ends:
            out.fail(f"committed offsets {committed}, the queues end at {ends}")
    out.answered = len(seen)
    if out.answered != expected:
        out.fail(f"drained {out.answered} of {expected}")
    out.latencies_s.sort()
    return out


async def pop_drain(
    port: int, group: str, topic: str, expected: int, *, batch: int, timeout_s: float
) -> Outcome:
    """Pop and ack each queue of `topic` until a pop finds nothing (no latencies)."""
    out = Outcome()
    totals = [0] * QUEUES
    async with open_producer("127.0.0.1", port) as conn:

        async def one(queue_id: int) -> None:
            totals[queue_id] = await pop_queue(
                conn, queue_id, topic=topic, group=group, batch=batch
            )

        started = time.monotonic()
        with trio.fail_after(timeout_s):
            async with trio.open_nursery() as nursery:
                for queue_id in range(QUEUES):
                    nursery.start_soon(one, queue_id)
        out.seconds = time.monotonic() - started
    out.answered = out.replies = sum(totals)
    if out.answered != expected:
        out.fail(f"popped and acked {out.answered} of {expected}")
    return out
