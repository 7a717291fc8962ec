"""SIGKILL the real daemon under SYNC_FLUSH load on tiny segments, configured by a TOML file.

With 32 KiB segments every cycle crosses several segment boundaries, so kills land while a
segment is being filled up with its END_OF_FILE blank, while the next one is being created and
reserved, and while the first record of a fresh segment is being written. After every restart:
each acknowledged message is present exactly once, at the physical offset its msgId names, with
its topic, queue, queue offset and body; every queue's offsets run 0..n-1; every record passes its
CRC; each segment is named by its start offset; and a kill leaves at most one stored but
unacknowledged message per producer (nothing unacknowledged beyond what was in flight).
`rmq-broker inspect` reads back the same records at the end. `RMQ_SOAK=1`: 150 cycles, not 10.
"""

from __future__ import annotations

import os
import pathlib
import random
import subprocess

import trio

from protocol.msgid import decode_offset_msg_id
from rmq_client.producer import ConnectionClosedError, Message, SendError, SendStatus, open_producer
from store.decode import CommitLogRecord
from store.reader import CommitLogReader
from tests.reliability.acks import Ack, check_acknowledged
from tests.reliability.toml_daemon import BROKER, SEGMENT_SIZE, TomlDaemon, write_config

SOAK = bool(os.environ.get("RMQ_SOAK"))
CYCLES = 10
SOAK_CYCLES = 150
PRODUCERS = 4
TOPICS = ("RollA", "RollB", "RollC")


async def produce_until_killed(daemon: TomlDaemon, cycle: int, rng: random.Random) -> list[Ack]:
    acks: list[Ack] = []
    first_ack = trio.Event()
    sizes = [rng.randrange(1, 3000) for _ in range(64)]

    async def producer(index: int) -> None:
        try:
            async with open_producer("127.0.0.1", daemon.port, timeout_s=10) as client:
                for seq in range(1_000_000):
                    tag = f"c{cycle}-p{index}-{seq}-".encode()
                    body = tag + b"x" * sizes[(seq + index) % len(sizes)]
                    topic = TOPICS[(seq + index) % len(TOPICS)]
                    result = await client.send(Message(topic, body))
                    assert result.status is SendStatus.SEND_OK, result
                    offset = decode_offset_msg_id(result.offset_msg_id)[2]
                    acks.append(Ack(offset, topic, result.queue_id, result.queue_offset, body))
                    first_ack.set()
        except* (ConnectionClosedError, SendError, OSError, trio.BrokenResourceError):
            pass  # the broker died under us: whatever was acknowledged must survive

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for index in range(PRODUCERS):
                nursery.start_soon(producer, index)
            # The kill comes at a random moment once traffic flows, however slow the machine.
            await first_ack.wait()
            await trio.sleep(rng.uniform(0.1, 0.5))
            daemon.kill()
    return acks


def read_all(store_dir: pathlib.Path) -> list[CommitLogRecord]:
    with CommitLogReader(str(store_dir)) as reader:
        return list(reader.iter_records(reader.min_offset, verify_crc=True))


def check_store(store_dir: pathlib.Path, acked: dict[int, Ack]) -> list[CommitLogRecord]:
    records = read_all(store_dir)
    check_acknowledged(records, acked)
    for segment in sorted((store_dir / "commitlog").iterdir()):
        if segment.name.isdigit():
            assert int(segment.name) % SEGMENT_SIZE == 0, f"misnamed segment {segment.name}"
    return records


def inspect_count(store_dir: pathlib.Path) -> int:
    done = subprocess.run(
        [*BROKER, "inspect", "--store-dir", str(store_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return sum(1 for line in done.stdout.splitlines() if line.startswith("{"))


def test_sigkill_on_tiny_segments_loses_no_acknowledged_message(tmp_path: pathlib.Path) -> None:
    cycles = SOAK_CYCLES if SOAK else CYCLES
    store_dir = tmp_path / "store"
    config = write_config(tmp_path / "broker.toml", store_dir)
    rng = random.Random(0x5E6 + cycles)
    acked: dict[int, Ack] = {}
    before = 0
    last_acks: list[Ack] = []
    for cycle in range(cycles):
        daemon = TomlDaemon(config)
        now = len(check_store(store_dir, acked))
        # A producer has one request in flight: a kill leaves at most one stored but
        # unacknowledged message per producer, and loses none that was acknowledged.
        assert len(last_acks) <= now - before <= len(last_acks) + PRODUCERS, (cycle, now, before)
        last_acks = trio.run(produce_until_killed, daemon, cycle, rng)
        assert last_acks, f"cycle {cycle}: nothing was acknowledged before the kill"
        for ack in last_acks:
            assert ack.offset not in acked, f"offset {ack.offset} acknowledged twice"
            acked[ack.offset] = ack
        before = now
    daemon = TomlDaemon(config)
    try:
        records = check_store(store_dir, acked)
    finally:
        assert daemon.stop() == 0
    unacked = len(records) - len(acked)
    assert 0 <= unacked <= cycles * PRODUCERS, "unacknowledged messages beyond those in flight"
    segments = [p for p in (store_dir / "commitlog").iterdir() if p.name.isdigit()]
    assert len(segments) > cycles, "the load should have rolled over many segments"
    assert inspect_count(store_dir) == len(records)
    print(
        f"crash_rollover cycles={cycles} acknowledged={len(acked)} stored={len(records)} "
        f"unacknowledged_stored={unacked} segments={len(segments)}"
    )
