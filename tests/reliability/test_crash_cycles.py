"""SIGKILL under SYNC_FLUSH load with 64 KiB segments, so kills land during appends, segment rolls
and segment pre-creation; singles and client-side batches over several connections, topics and
queues. After each restart: every acknowledged message is present exactly once at the offset its
msgId names, with its topic, queue and queue offset; every queue's offsets run 0..n-1; a batch is
visible whole or not at all (acknowledged or not); `rmq-broker inspect` agrees with the reader.
`RMQ_SOAK=1` sizes the slow variant to 200 cycles.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import random
import signal
import subprocess
from collections import defaultdict

import pytest
import trio

from protocol.msgid import decode_offset_msg_id
from rmq_client.producer import ConnectionClosedError, Message, SendError, SendStatus, open_producer
from tests.daemon import BROKER
from tests.reliability.acks import Ack, check_acknowledged
from tests.reliability.conftest import SOAK, Daemon, read_records

PRODUCERS = 3
#: kill cycles of the bounded run (the soak variant has its own count)
CYCLES = 10
TOPICS = ("CycleA", "CycleB")


async def load_until_killed(daemon: Daemon, cycle: int, rng: random.Random) -> dict[int, Ack]:
    """Load from `PRODUCERS` connections until a SIGKILL at a random moment; the acknowledged
    messages. A producer may stop only because of the kill: a refusal (SendError), a status
    other than SEND_OK or a connection lost before the kill fails the cycle."""
    acks: dict[int, Ack] = {}
    failures: list[str] = []
    killed = False
    first_ack = trio.Event()

    async def producer(index: int) -> None:
        try:
            async with open_producer("127.0.0.1", daemon.port, timeout_s=10) as client:
                for seq in range(1_000_000):
                    topic = TOPICS[seq % 2]
                    tag = f"c{cycle}-p{index}-s{seq}"
                    if seq % 3 == 2:
                        batch = [Message(topic, f"{tag}-b{i}/{3}".encode() * 4) for i in range(3)]
                        result = await client.send_batch(batch)
                        bodies = [m.body for m in batch]
                    else:
                        body = tag.encode() * rng.randint(1, 30)
                        result = await client.send(Message(topic, body))
                        bodies = [body]
                    if result.status is not SendStatus.SEND_OK:
                        failures.append(f"producer {index} seq {seq}: {result.status.name}")
                        return
                    ids = result.offset_msg_id.split(",")
                    assert len(ids) == len(bodies)
                    for i, (msg_id, body) in enumerate(zip(ids, bodies, strict=True)):
                        offset = decode_offset_msg_id(msg_id)[2]
                        ack = Ack(offset, topic, result.queue_id, result.queue_offset + i, body)
                        acks[offset] = ack
                    first_ack.set()
        except* SendError as refused:
            failures.append(f"producer {index} refused: {refused.exceptions[0]}")
        except* (ConnectionClosedError, OSError, trio.BrokenResourceError) as lost:
            if not killed:  # after the kill it is what a crash looks like to a client
                failures.append(f"producer {index} lost its connection: {lost.exceptions[0]!r}")
        finally:
            first_ack.set()  # a producer that ended early does not hold the kill back

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for index in range(PRODUCERS):
                nursery.start_soon(producer, index)
            # the kill lands under load: a random moment after the first acknowledgement
            await first_ack.wait()
            await trio.sleep(rng.uniform(0.1, 0.5))
            killed = True
            os.kill(daemon.process.pid, signal.SIGKILL)
    daemon.process.wait(10)
    assert not failures, f"cycle {cycle}: producers stopped before the kill: {failures}"
    return acks


def check(store_dir: pathlib.Path, acked: dict[int, Ack]) -> int:
    records = read_records(store_dir)
    check_acknowledged(records, acked)
    bodies = [r.body or b"" for r in records]
    batches: dict[bytes, int] = defaultdict(int)
    for body in bodies:
        if b"/3" in body:
            batches[body.split(b"-b")[0]] += 1
    half = {tag: n for tag, n in batches.items() if n != 3}
    assert not half, f"batches partly visible: {half}"
    return len(records)


def inspect_offsets(store_dir: pathlib.Path) -> dict[int, bytes]:
    out = subprocess.run(
        [*BROKER, "inspect", "--store-dir", str(store_dir), "--body"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    return {line["physical_offset"]: base64.b64decode(line["body"]) for line in lines}


def run_cycles(store_dir: pathlib.Path, cycles: int, seed: int) -> tuple[int, int]:
    rng = random.Random(seed)
    acked: dict[int, Ack] = {}
    for cycle in range(cycles):
        daemon = Daemon(store_dir, "--flush-disk-type", "SYNC_FLUSH")
        check(store_dir, acked)
        acks = trio.run(load_until_killed, daemon, cycle, rng)
        assert acks, f"cycle {cycle}: nothing acknowledged before the kill"
        assert not acks.keys() & acked.keys(), "an offset was acknowledged twice"
        acked.update(acks)
    daemon = Daemon(store_dir, "--flush-disk-type", "SYNC_FLUSH")
    try:
        stored = check(store_dir, acked)
    finally:
        assert daemon.stop() == 0
    listed = inspect_offsets(store_dir)
    assert len(listed) == stored
    assert all(listed.get(o) == a.body for o, a in acked.items())
    return len(acked), stored


def test_sigkill_cycles_with_batches_and_segment_rolls(store_dir: pathlib.Path) -> None:
    acked, stored = run_cycles(store_dir, CYCLES, 7)
    print(f"crash_cycles cycles={CYCLES} acknowledged={acked} stored={stored} lost=0")


@pytest.mark.slow
def test_sigkill_cycles_soak(store_dir: pathlib.Path) -> None:
    cycles = 200 if SOAK else 3
    acked, stored = run_cycles(store_dir, cycles, 11)
    print(f"crash_cycles_soak cycles={cycles} acknowledged={acked} stored={stored} lost=0")
