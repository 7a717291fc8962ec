"""What ASYNC_FLUSH exposes: acknowledged data not yet durable, against the flush policy.

ASYNC_FLUSH answers after the append to the page cache. A SIGKILL loses none of it (the page
cache belongs to the kernel), which the restart checks. A power loss loses what the store had not
flushed yet; the store publishes its durable offset in `flushoffset`, so the test samples it while
producers run. Under load, flush rounds (every `flush_interval_commit_log_ms` once
`flush_commit_log_least_pages` pages are dirty) must advance the durable offset while the load
goes on; a trickle that never dirties that many pages must still become durable with no further
write (the thorough flush, every `flush_commit_log_thorough_interval_ms`). Each is waited for with
a generous deadline: the exact schedule is checked on a mock clock by
tests/store/test_flush.py::test_async_flush_schedule, and how long data stays exposed is printed
here, not asserted (speeds belong in bench/).
"""

from __future__ import annotations

import bisect
import pathlib
import time

import trio

from protocol.msgid import decode_offset_msg_id
from rmq_client.producer import Message, SendStatus, open_producer
from store.checkpoint import read_flush_offset
from tests.reliability.conftest import SOAK, Daemon, read_records

INTERVAL_MS = 200
THOROUGH_MS = 1500
#: flush rounds the durable offset must advance by while the load is still running
ROUNDS_UNDER_LOAD = 6 if SOAK else 3
TRICKLE = 8  # messages of BODY bytes: at most 3 pages, fewer than least_pages (4)
BODY = 1024
#: a generous bound on every wait for the store
DEADLINE_S = 60.0

Ack = tuple[float, int, bytes]  # (acknowledged at, physical offset, body)


def durable_offset(store_dir: pathlib.Path) -> int:
    triple = read_flush_offset(str(store_dir))
    return 0 if triple is None else triple[0]


class Sampler:
    """The durable offset sampled every 5 ms: `samples` of (time, offset); `advances` counts
    the times it moved."""

    def __init__(self, store_dir: pathlib.Path) -> None:
        self.store_dir = store_dir
        self.samples: list[tuple[float, int]] = []
        self.advances = 0

    async def run(self) -> None:
        while True:
            offset = durable_offset(self.store_dir)
            if self.samples and offset > self.samples[-1][1]:
                self.advances += 1
            self.samples.append((time.monotonic(), offset))
            await trio.sleep(0.005)

    async def until(self, end: int) -> None:
        """Return once everything below `end` is durable."""
        with trio.fail_after(DEADLINE_S):
            while not self.samples or self.samples[-1][1] < end:  # noqa: ASYNC110
                await trio.sleep(0.01)


async def produce(
    port: int, acks: list[Ack], *, producers: int, stop: trio.Event, pause_s: float = 0.0
) -> None:
    async def one(index: int) -> None:
        async with open_producer("127.0.0.1", port, timeout_s=DEADLINE_S) as client:
            seq = 0
            while not stop.is_set():
                body = f"p{index}-{seq:07d}-".encode().ljust(BODY, b"a")
                result = await client.send(Message("AsyncLoss", body))
                assert result.status is SendStatus.SEND_OK
                acks.append((time.monotonic(), decode_offset_msg_id(result.offset_msg_id)[2], body))
                seq += 1
                if pause_s:
                    await trio.sleep(pause_s)

    async with trio.open_nursery() as nursery:
        for index in range(producers):
            nursery.start_soon(one, index)


def exposure(acks: list[Ack], samples: list[tuple[float, int]]) -> tuple[float, int]:
    """(longest time an acknowledged message was not durable, most acknowledged bytes exposed)."""
    times = [t for t, _ in samples]
    worst_s = 0.0
    for acked_at, offset, _ in acks:
        index = bisect.bisect_left(times, acked_at)
        durable_at = next((t for t, d in samples[index:] if d > offset), None)
        assert durable_at is not None, f"acknowledged message at {offset} never became durable"
        worst_s = max(worst_s, durable_at - acked_at)
    ordered = sorted(acks)
    ack_times = [t for t, _, _ in ordered]
    running_end: list[int] = []
    for _, offset, _ in ordered:
        running_end.append(max(offset + BODY, running_end[-1] if running_end else 0))
    worst_bytes = 0
    for sample_time, durable in samples:
        count = bisect.bisect_right(ack_times, sample_time)
        if count:
            worst_bytes = max(worst_bytes, running_end[count - 1] - durable)
    return worst_s, worst_bytes


def end_of(acks: list[Ack]) -> int:
    return max(offset for _, offset, _ in acks) + BODY


async def under_load(daemon: Daemon, store_dir: pathlib.Path) -> tuple[list[Ack], float, int]:
    """Three producers until the durable offset has advanced `ROUNDS_UNDER_LOAD` times while
    they ran; then everything they were acknowledged must become durable."""
    acks: list[Ack] = []
    sampler = Sampler(store_dir)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sampler.run)
        async with trio.open_nursery() as producers:
            producers.start_soon(lambda: produce(daemon.port, acks, producers=3, stop=stop))
            with trio.fail_after(DEADLINE_S):
                while sampler.advances < ROUNDS_UNDER_LOAD:  # noqa: ASYNC110
                    await trio.sleep(0.01)
            stop.set()
        assert (acks and sampler.samples[-1][1] < end_of(acks)) or sampler.advances
        await sampler.until(end_of(acks))
        nursery.cancel_scope.cancel()
    return acks, *exposure(acks, sampler.samples)


async def trickle(daemon: Daemon, store_dir: pathlib.Path) -> tuple[list[Ack], float, int]:
    """A message every 150 ms, too few pages for a flush round: only the thorough flush can
    make them durable, and it must, with nothing written after them."""
    acks: list[Ack] = []
    sampler = Sampler(store_dir)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sampler.run)
        async with open_producer("127.0.0.1", daemon.port, timeout_s=DEADLINE_S) as client:
            for seq in range(TRICKLE):
                body = f"t-{seq:07d}-".encode().ljust(BODY, b"t")
                result = await client.send(Message("AsyncLoss", body))
                acks.append((time.monotonic(), decode_offset_msg_id(result.offset_msg_id)[2], body))
                await trio.sleep(0.15)
        await sampler.until(end_of(acks))
        nursery.cancel_scope.cancel()
    return acks, *exposure(acks, sampler.samples)


async def burst(port: int, count: int) -> list[Ack]:
    acks: list[Ack] = []
    async with open_producer("127.0.0.1", port, timeout_s=DEADLINE_S) as client:
        for seq in range(count):
            body = f"b-{seq:07d}-".encode().ljust(BODY, b"b")
            result = await client.send(Message("AsyncLoss", body))
            acks.append((time.monotonic(), decode_offset_msg_id(result.offset_msg_id)[2], body))
    return acks


def test_async_flush_exposure_stays_within_the_policy_and_sigkill_loses_nothing(
    store_dir: pathlib.Path, daemons: list[Daemon]
) -> None:
    env = {
        "RMQ_FLUSH_INTERVAL_COMMIT_LOG_MS": str(INTERVAL_MS),
        "RMQ_FLUSH_COMMIT_LOG_THOROUGH_INTERVAL_MS": str(THOROUGH_MS),
        "RMQ_MAPPED_FILE_SIZE_COMMIT_LOG": str(1 << 20),
    }
    daemon = Daemon(store_dir, "--flush-disk-type", "ASYNC_FLUSH", env=env)
    daemons.append(daemon)
    busy, busy_s, busy_bytes = trio.run(under_load, daemon, store_dir)
    slow, trickle_s, trickle_bytes = trio.run(trickle, daemon, store_dir)
    # A last burst, then SIGKILL, likely before the next flush round: the page cache keeps it.
    last = trio.run(burst, daemon.port, 200)
    unflushed = end_of(last) - durable_offset(store_dir)
    daemon.kill()
    restarted = Daemon(store_dir, "--flush-disk-type", "ASYNC_FLUSH", env=env)
    daemons.append(restarted)
    stored = {r.physical_offset: r.body for r in read_records(store_dir)}
    lost = [o for _, o, body in busy + slow + last if stored.get(o) != body]
    assert lost == []
    assert restarted.stop() == 0
    print(
        f"async_flush acked={len(busy) + len(slow) + len(last)} lost_after_sigkill=0 "
        f"busy_worst_ms={busy_s * 1000:.0f} busy_worst_bytes={busy_bytes} "
        f"trickle_worst_ms={trickle_s * 1000:.0f} trickle_worst_bytes={trickle_bytes} "
        f"unflushed_at_kill_bytes={unflushed}"
    )
