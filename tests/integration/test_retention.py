"""Retention against a real `rmq-broker serve`: a compressed month (64 KiB segments kept for
3.6 s, producers and consumers running meanwhile), and a small tmpfs driven past the
clean-forcibly ratio with nothing expired.

The month runs 12 s in `make test` and three minutes with `RMQ_SOAK=1`.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import trio

from protocol.codes import ResponseCode
from protocol.msgid import decode_offset_msg_id
from rmq_client.producer import Message, SendError, SendStatus, open_producer
from rmq_client.pull_consumer import PullConsumer, open_pull_consumer
from store.reader import CommitLogReader
from tests.daemon import Daemon

SOAK = bool(os.environ.get("RMQ_SOAK"))
RUN_S = 180.0 if SOAK else 12.0
SEGMENT = 64 * 1024
RESERVED_HOURS = 0.001  # 3.6 s
RESERVED_S = RESERVED_HOURS * 3600
CLEAN_INTERVAL_MS = 500
TOPIC = "Month"
QUEUES = 4
BODY = 1000
ALL_HOURS = ";".join(str(hour) for hour in range(24))


def retention_env(**extra: str) -> dict[str, str]:
    return {
        "RMQ_MAPPED_FILE_SIZE_COMMIT_LOG": str(SEGMENT),
        "RMQ_MAPPED_FILE_SIZE_CONSUME_QUEUE": str(20 * 128),
        "RMQ_FILE_RESERVED_TIME": str(RESERVED_HOURS),
        "RMQ_DELETE_WHEN": ALL_HOURS,
        "RMQ_CLEAN_RESOURCE_INTERVAL": str(CLEAN_INTERVAL_MS),
        "RMQ_DELETE_PHYSIC_FILES_INTERVAL": "10",
        "RMQ_DELETE_CONSUME_QUEUE_FILES_INTERVAL": "0",
        **extra,
    }


def body_of(seq: int) -> bytes:
    return f"{seq:08d}".encode().ljust(BODY, b".")


def dir_bytes(path: pathlib.Path) -> int:
    """Disk blocks the files under `path` take (consume-queue files are sparse)."""
    total = 0
    for entry in path.rglob("*"):
        try:
            total += entry.stat().st_blocks * 512 if entry.is_file() else 0
        except FileNotFoundError:
            continue  # deleted while walking
    return total


def free_bytes(path: pathlib.Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


@dataclass
class Month:
    """What the producers acknowledged and what each consumer received, per queue."""

    acked: dict[int, dict[int, bytes]] = field(default_factory=dict)  # queue -> offset -> body
    received: dict[str, dict[int, list[tuple[int, bytes]]]] = field(default_factory=dict)
    #: the late group: (queue, its committed offset when it started, the min just before)
    late_start: dict[int, tuple[int, int]] = field(default_factory=dict)
    moved: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)
    peak_bytes: int = 0
    producing: bool = True


async def produce(port: int, month: Month, stop_at: float, worker: int) -> None:
    async with open_producer("127.0.0.1", port, timeout_s=10) as producer:
        seq = worker
        while trio.current_time() < stop_at:
            queue_id = seq % QUEUES
            result = await producer.send(Message(TOPIC, body_of(seq), queue_id=queue_id))
            assert result.status is SendStatus.SEND_OK
            month.acked.setdefault(queue_id, {})[result.queue_offset] = body_of(seq)
            seq += 2
            await trio.sleep(0.004)


async def consume_queue(
    consumer: PullConsumer, month: Month, queue_id: int, offset: int, until: trio.Event
) -> None:
    """Pull `queue_id` from `offset` until the producers stopped and the queue is drained."""
    got = month.received.setdefault(consumer.group, {}).setdefault(queue_id, [])
    while True:
        result = await consumer.pull(TOPIC, queue_id, offset, suspend_ms=200)
        if result.code == ResponseCode.PULL_OFFSET_MOVED:
            month.moved.setdefault(consumer.group, []).append(
                (queue_id, offset, result.next_begin_offset)
            )
            offset = result.next_begin_offset
            continue
        got.extend((r.queue_offset, r.body or b"") for r in result.records)
        offset = result.next_begin_offset
        if result.records:
            await consumer.commit(TOPIC, queue_id, offset)
        elif until.is_set() and offset >= result.max_offset:
            return


async def keep_up(port: int, month: Month, done: trio.Event) -> None:
    async with open_pull_consumer("127.0.0.1", port, "month_keep_up") as consumer:
        await consumer.subscribe(TOPIC)
        async with trio.open_nursery() as nursery:
            for queue_id in range(QUEUES):
                nursery.start_soon(consume_queue, consumer, month, queue_id, 0, done)


async def late(port: int, month: Month, start_at: float, done: trio.Event) -> None:
    """A group that committed 0 and then stayed away past the retention time."""
    async with open_pull_consumer("127.0.0.1", port, "month_late", client_id="late@0") as consumer:
        await consumer.subscribe(TOPIC)
        for queue_id in range(QUEUES):
            await consumer.commit(TOPIC, queue_id, 0)
        await trio.sleep_until(start_at)
        async with trio.open_nursery() as nursery:
            for queue_id in range(QUEUES):
                floor = await consumer.min_offset(TOPIC, queue_id)
                committed = await consumer.committed(TOPIC, queue_id)
                assert committed is not None
                month.late_start[queue_id] = (committed, floor)
                nursery.start_soon(consume_queue, consumer, month, queue_id, committed, done)


async def watch_disk(store_dir: pathlib.Path, month: Month, done: trio.Event) -> None:
    while not done.is_set():
        size = await trio.to_thread.run_sync(dir_bytes, store_dir / "commitlog")
        month.peak_bytes = max(month.peak_bytes, size)
        await trio.sleep(0.25)


async def run_month(port: int, store_dir: pathlib.Path) -> Month:
    month = Month()
    done = trio.Event()
    start = trio.current_time()
    async with trio.open_nursery() as consumers:
        consumers.start_soon(keep_up, port, month, done)
        consumers.start_soon(late, port, month, start + RUN_S / 2, done)
        consumers.start_soon(watch_disk, store_dir, month, done)
        async with trio.open_nursery() as producers:
            for worker in range(2):
                producers.start_soon(produce, port, month, start + RUN_S, worker)
        done.set()
    return month


def check_queue(got: list[tuple[int, bytes]], acked: dict[int, bytes], first: int) -> None:
    """Received exactly once, in queue order, from `first` to the end, the bodies acked."""
    offsets = [offset for offset, _ in got]
    assert offsets == list(range(first, max(acked) + 1)), (offsets[:5], first, len(offsets))
    for offset, body in got:
        assert body == acked[offset], offset


def test_a_compressed_month_keeps_disk_bounded_and_consumers_whole(tmp_path: pathlib.Path) -> None:
    store_dir = tmp_path / "store"
    daemon = Daemon(store_dir, "--flush-disk-type", "SYNC_FLUSH", env=retention_env())
    try:
        month = trio.run(run_month, daemon.port, store_dir)
        assert daemon.process.poll() is None, daemon.text()
        daemon.drain()
    finally:
        assert daemon.stop() == 0
    deleted = [e for e in daemon.events if e.get("event") == "segment_deleted"]
    cq_deleted = [e for e in daemon.events if e.get("event") == "consume_queue_file_deleted"]
    acked_count = sum(len(offsets) for offsets in month.acked.values())
    print(
        f"month run_s={RUN_S} acked={acked_count} segments_deleted={len(deleted)} "
        f"cq_files_deleted={len(cq_deleted)} peak_commitlog_bytes={month.peak_bytes} "
        f"moved={month.moved}"
    )
    assert len(deleted) >= 3 and {e["reason"] for e in deleted} == {"expired"}
    offsets = [int(str(e["offset"])) for e in deleted]
    assert offsets == sorted(offsets)  # oldest first
    assert cq_deleted
    # Disk: what arrived within the reserved time plus a round, with a few segments to spare.
    rate = acked_count * (BODY + 200) / RUN_S
    bound = rate * (RESERVED_S + CLEAN_INTERVAL_MS / 1000 + 2) + 6 * SEGMENT
    assert month.peak_bytes <= bound, (month.peak_bytes, bound)
    # The consumer that kept up lost nothing and saw nothing twice.
    assert "month_keep_up" not in month.moved
    for queue_id, acked in month.acked.items():
        check_queue(month.received["month_keep_up"][queue_id], acked, 0)
    # The late one starts at the oldest message still stored when it asked, then misses nothing.
    for queue_id, acked in month.acked.items():
        committed, floor = month.late_start[queue_id]
        assert committed >= floor > 0, (queue_id, committed, floor)
        got = month.received["month_late"][queue_id]
        first = got[0][0] if got else committed
        assert first >= committed
        check_queue(got, acked, first)
    # What the store kept is readable and ends where the producers stopped.
    with CommitLogReader(str(store_dir)) as reader:
        assert reader.min_offset > 0
        records = list(reader.iter_records(reader.min_offset, include_body=False))
    assert records and all(r.topic == TOPIC for r in records)


# --- a small tmpfs, nothing expired -----------------------------------------------------------

FS_SIZE = 8 << 20
FS_SEGMENT = 512 << 10


@pytest.fixture
def small_fs(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    mount = tmp_path / "fs"
    mount.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={FS_SIZE}", "tmpfs", str(mount)], check=True
    )
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


async def send_some(port: int, count: int, acked: dict[int, bytes], refused: list[int]) -> None:
    """`count` sends of 32 KiB; refusals (a full disk) are counted, never acknowledged."""
    async with open_producer("127.0.0.1", port, timeout_s=10) as producer:
        for seq in range(count):
            body = f"{len(acked):06d}".encode().ljust(32 << 10, b"#")
            try:
                result = await producer.send(Message("Full", body))
            except SendError as exc:
                assert exc.code == ResponseCode.SERVICE_NOT_AVAILABLE, exc
                refused.append(seq)
                await trio.sleep(0.05)
                continue
            acked[decode_offset_msg_id(result.offset_msg_id)[2]] = body


def test_a_full_disk_with_nothing_expired_is_cleaned_and_sends_resume(
    small_fs: pathlib.Path,
) -> None:
    store_dir = small_fs / "store"
    env = {
        "RMQ_MAPPED_FILE_SIZE_COMMIT_LOG": str(FS_SEGMENT),
        "RMQ_CLEAN_RESOURCE_INTERVAL": "200",
        "RMQ_DISK_CHECK_INTERVAL_MS": "100",
        "RMQ_DELETE_PHYSIC_FILES_INTERVAL": "0",
    }
    daemon = Daemon(store_dir, "--flush-disk-type", "SYNC_FLUSH", env=env)
    acked: dict[int, bytes] = {}
    refused: list[int] = []
    try:
        trio.run(send_some, daemon.port, 80, acked, refused)  # about 2.5 MiB in 6 segments
        assert not refused
        # Another tenant of the disk takes it past the warning ratio (90 %).
        filler = small_fs / "filler"
        filler.write_bytes(b"\1" * (free_bytes(small_fs) - (320 << 10)))
        daemon.wait_for("disk_full", 10)
        forced = daemon.wait_for("segment_deleted", 10)
        assert forced["reason"] == "forced"
        daemon.wait_for("disk_space_recovered", 10)
        before = len(acked)
        # No restart: sends go on, the cleanup making room whenever the disk fills again.
        trio.run(send_some, daemon.port, 40, acked, refused)
        assert len(acked) - before >= 20, (len(acked) - before, len(refused))
        assert daemon.process.poll() is None
    finally:
        assert daemon.stop() == 0
    reasons = {e["reason"] for e in daemon.events if e.get("event") == "segment_deleted"}
    assert reasons == {"forced"}
    with CommitLogReader(str(store_dir)) as reader:
        first = reader.min_offset
        stored = {r.physical_offset: r.body for r in reader.iter_records(first)}
    assert first > 0
    kept = {offset: body for offset, body in acked.items() if offset >= first}
    assert len(kept) >= 40
    assert all(stored.get(offset) == body for offset, body in kept.items())
