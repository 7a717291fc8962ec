"""What ASYNC_FLUSH exposes: acknowledged data not yet durable, measured against the flush policy.

ASYNC_FLUSH answers after the append to the page cache. A SIGKILL loses none of it (the page
cache belongs to the kernel), which the restart checks. A power loss loses what the store had not
flushed yet; the store publishes its durable offset in `flushoffset`, so the test samples it while
producers run and measures, for every acknowledged message, how long it stayed not durable and
how many acknowledged bytes were exposed at worst. Both must stay within the policy: a flush round
every `flush_interval_commit_log_ms` once `flush_commit_log_least_pages` pages are dirty, and a
full flush every `flush_commit_log_thorough_interval_ms` whatever is dirty.
"""

from __future__ import annotations

import bisect
import pathlib
import time

import trio

from broker.client import Message, SendStatus, open_producer
from protocol.msgid import decode_offset_msg_id
from store.checkpoint import read_flush_offset
from tests.reliability.conftest import SOAK, Daemon, read_records

INTERVAL_MS = 200
THOROUGH_MS = 1500
#: scheduling slack on 2 shared cores: a flush round can start late and an fdatasync take long
SLACK_S = 1.0
LOAD_S = 20.0 if SOAK else 3.0
BODY = 1024


async def sample_durable(store_dir: pathlib.Path, samples: list[tuple[float, int]]) -> None:
    while True:
        triple = read_flush_offset(str(store_dir))
        if triple is not None:
            samples.append((time.monotonic(), triple[0]))
        await trio.sleep(0.005)


async def produce(
    port: int, seconds: float, pause_s: float, acks: list[tuple[float, int, bytes]]
) -> None:
    async def one(index: int) -> None:
        async with open_producer("127.0.0.1", port) as client:
            deadline = time.monotonic() + seconds
            seq = 0
            while time.monotonic() < deadline:
                body = f"p{index}-{seq:07d}-".encode().ljust(BODY, b"a")
                result = await client.send(Message("AsyncLoss", body))
                assert result.status is SendStatus.SEND_OK
                acks.append((time.monotonic(), decode_offset_msg_id(result.offset_msg_id)[2], body))
                seq += 1
                if pause_s:
                    await trio.sleep(pause_s)

    async with trio.open_nursery() as nursery:
        for index in range(3 if not pause_s else 1):
            nursery.start_soon(one, index)


def exposure(
    acks: list[tuple[float, int, bytes]], samples: list[tuple[float, int]]
) -> tuple[float, int]:
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


async def measure(
    daemon: Daemon, store_dir: pathlib.Path, pause_s: float, seconds: float
) -> tuple[list[tuple[float, int, bytes]], float, int]:
    acks: list[tuple[float, int, bytes]] = []
    samples: list[tuple[float, int]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample_durable, store_dir, samples)
        with trio.fail_after(seconds + 30):
            await produce(daemon.port, seconds, pause_s, acks)
            # keep sampling until everything acknowledged is durable (or the policy is broken)
            await trio.sleep(THOROUGH_MS / 1000 + INTERVAL_MS / 1000 + SLACK_S)
        nursery.cancel_scope.cancel()
    worst_s, worst_bytes = exposure(acks, samples)
    return acks, worst_s, worst_bytes


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
    # Under load more than least_pages pages are dirty at every round: bound = one interval.
    busy, busy_s, busy_bytes = trio.run(measure, daemon, store_dir, 0.0, LOAD_S)
    assert len(busy) > 200
    assert busy_s <= INTERVAL_MS / 1000 + SLACK_S, busy_s
    # A trickle never dirties least_pages pages: only the thorough flush covers it.
    trickle, trickle_s, trickle_bytes = trio.run(measure, daemon, store_dir, 0.15, 2.0)
    assert trickle_s <= (THOROUGH_MS + INTERVAL_MS) / 1000 + SLACK_S, trickle_s
    assert trickle_bytes <= 4 * 4096 + BODY + 512, trickle_bytes
    # A last burst, then SIGKILL before the next flush round: the page cache keeps it all.
    burst: list[tuple[float, int, bytes]] = []
    trio.run(produce, daemon.port, 0.3, 0.0, burst)
    unflushed = max(o for _, o, _ in burst) + BODY - (read_flush_offset(str(store_dir)) or (0,))[0]
    daemon.kill()
    restarted = Daemon(store_dir, "--flush-disk-type", "ASYNC_FLUSH", env=env)
    daemons.append(restarted)
    stored = {r.physical_offset: r.body for r in read_records(store_dir)}
    lost = [o for _, o, body in busy + trickle + burst if stored.get(o) != body]
    assert lost == []
    assert restarted.stop() == 0
    print(
        f"async_flush acked={len(busy) + len(trickle) + len(burst)} lost_after_sigkill=0 "
        f"busy_worst_ms={busy_s * 1000:.0f} busy_worst_bytes={busy_bytes} "
        f"trickle_worst_ms={trickle_s * 1000:.0f} trickle_worst_bytes={trickle_bytes} "
        f"unflushed_at_kill_bytes={unflushed}"
    )
