"""Crash recovery: a SYNC_FLUSH producer process is SIGKILLed at random moments, several times;
every acknowledged message survives, torn tails are gone and offsets continue."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import trio

from store.message_store import DefaultMessageStore
from store.reader import CommitLogReader
from tests.store.crash_child import crash_config

ROOT = Path(__file__).resolve().parents[2]
CYCLES = 6


def _run_and_kill(store_dir: str, first: int, run_s: float) -> tuple[int, dict[int, int]]:
    """Start the producer, let it run `run_s` after it is ready, SIGKILL it; (start, acked)."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.store.crash_child", store_dir, str(first)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert child.stdout is not None
    fd = child.stdout.fileno()
    output = b""
    stop: float | None = None
    give_up = time.monotonic() + 30
    while stop is None or time.monotonic() < stop:
        assert time.monotonic() < give_up, "the producer never became ready"
        readable, _, _ = select.select([fd], [], [], 0.01)
        if readable:
            output += os.read(fd, 1 << 16)
        if stop is None and b"\n" in output:
            stop = time.monotonic() + run_s
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    output += child.stdout.read()
    lines = output.decode().splitlines()
    ready = lines[0].split()
    assert ready[0] == "ready", ready
    acked = {}
    for line in lines[1:]:
        parts = line.split()
        if len(parts) == 2:  # the last line may be cut by the kill
            acked[int(parts[0])] = int(parts[1])
    return int(ready[1]), acked


async def test_sigkill_cycles_keep_every_acknowledged_message(tmp_path: Path) -> None:
    store_dir = str(tmp_path / "store")
    rng = random.Random(1234)
    all_acked: dict[int, int] = {}
    first = 0
    previous_end = 0
    for cycle in range(CYCLES):
        started_at, acked = await trio.to_thread.run_sync(
            _run_and_kill, store_dir, first, rng.uniform(0.2, 1.2)
        )
        assert acked, f"cycle {cycle}: nothing acknowledged"
        assert started_at >= previous_end  # offsets continue after each recovery
        assert min(acked.values()) >= started_at
        all_acked.update(acked)
        first = max(acked) + 1000
        async with DefaultMessageStore.open(crash_config(store_dir)) as store:
            previous_end = store.max_offset
            assert store.flushed_where == store.max_offset
            table = dict(store.topic_queue_table)
        with CommitLogReader(store_dir) as reader:
            records = {r.physical_offset: r for r in reader.iter_records(reader.min_offset)}
            assert reader.durable_offset() == previous_end
        for sequence, offset in all_acked.items():
            record = records[offset]
            assert record.body is not None and record.body.startswith(b"seq:%d:" % sequence)
            assert record.crc_ok
        for queue_id in range(4):
            queue_offsets = sorted(
                r.queue_offset for r in records.values() if r.queue_id == queue_id
            )
            assert queue_offsets == list(range(len(queue_offsets)))
            assert table.get(f"crash-{queue_id}", 0) == len(queue_offsets)
