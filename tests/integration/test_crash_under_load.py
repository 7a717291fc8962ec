"""SIGKILL the real daemon while producers send SYNC_FLUSH messages, restart it, and check the log.

After every restart: each acknowledged message is in the commit log exactly once, at the physical
offset its acknowledgement named, with its body; queue offsets of every queue run 0..n-1 without
gaps or duplicates; every stored record passes its CRC (nothing half-written is visible).
`RMQ_SOAK=1` runs many more cycles.
"""

from __future__ import annotations

import os
import pathlib
import random
import signal
from collections import defaultdict
from dataclasses import dataclass

import trio

from broker.client import ConnectionClosedError, Message, SendError, SendStatus, open_producer
from protocol.msgid import decode_offset_msg_id
from store.reader import CommitLogReader
from tests.broker.test_daemon import Daemon

CYCLES = 200 if os.environ.get("RMQ_SOAK") else 20
PRODUCERS = 4
TOPICS = ("CrashA", "CrashB")


@dataclass(frozen=True, slots=True)
class Ack:
    offset: int
    topic: str
    queue_id: int
    queue_offset: int
    body: bytes


async def produce_until_killed(daemon: Daemon, cycle: int, rng: random.Random) -> list[Ack]:
    acks: list[Ack] = []

    async def producer(index: int) -> None:
        try:
            async with open_producer("127.0.0.1", daemon.port, timeout_s=10) as client:
                for seq in range(1_000_000):
                    body = f"c{cycle}-p{index}-{seq}".encode()
                    result = await client.send(Message(TOPICS[seq % 2], body))
                    assert result.status is SendStatus.SEND_OK
                    offset = decode_offset_msg_id(result.offset_msg_id)[2]
                    acks.append(
                        Ack(offset, TOPICS[seq % 2], result.queue_id, result.queue_offset, body)
                    )
        except* (ConnectionClosedError, SendError, OSError, trio.BrokenResourceError):
            pass  # the broker died under us: whatever was acknowledged must survive

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for index in range(PRODUCERS):
                nursery.start_soon(producer, index)
            await trio.sleep(rng.uniform(0.2, 0.8))
            os.kill(daemon.process.pid, signal.SIGKILL)
    daemon.process.wait(10)
    return acks


def check_store(store_dir: pathlib.Path, acked: dict[int, Ack]) -> int:
    with CommitLogReader(str(store_dir)) as reader:
        records = list(reader.iter_records(reader.min_offset, verify_crc=True))
    assert all(rec.crc_ok for rec in records)
    by_offset = {rec.physical_offset: rec for rec in records}
    assert len(by_offset) == len(records)
    for offset, ack in acked.items():
        rec = by_offset.get(offset)
        assert rec is not None, f"acknowledged message at {offset} is missing"
        assert (rec.topic, rec.queue_id, rec.queue_offset) == (
            ack.topic,
            ack.queue_id,
            ack.queue_offset,
        )
        assert rec.body == ack.body
    bodies = [rec.body for rec in records]
    assert len(set(bodies)) == len(bodies), "a message is stored twice"
    queues: dict[tuple[str, int], list[int]] = defaultdict(list)
    for rec in records:
        queues[(rec.topic, rec.queue_id)].append(rec.queue_offset)
    for key, offsets in queues.items():
        assert offsets == list(range(len(offsets))), f"queue {key} has gaps or duplicates"
    return len(records)


def test_sigkill_under_sync_load_loses_no_acknowledged_message(tmp_path: pathlib.Path) -> None:
    store_dir = tmp_path / "store"
    rng = random.Random(20261122)
    acked: dict[int, Ack] = {}
    stored = 0
    for cycle in range(CYCLES):
        daemon = Daemon(store_dir, "--flush-disk-type", "SYNC_FLUSH")
        stored = check_store(store_dir, acked)  # the restart recovered what the last kill left
        acks = trio.run(produce_until_killed, daemon, cycle, rng)
        assert acks, f"cycle {cycle}: nothing was acknowledged before the kill"
        for ack in acks:
            assert ack.offset not in acked, f"offset {ack.offset} acknowledged twice"
            acked[ack.offset] = ack
    daemon = Daemon(store_dir, "--flush-disk-type", "SYNC_FLUSH")
    try:
        stored = check_store(store_dir, acked)
    finally:
        daemon.process.terminate()
        daemon.finish()
    assert stored >= len(acked) > CYCLES
    print(f"crash_under_load cycles={CYCLES} acknowledged={len(acked)} stored={stored}")
