"""A store on a real size-limited file system (tmpfs) that fills up completely while the daemon
runs: not only the next segment, but every small file the store and broker rewrite (checkpoint,
topic-queue table snapshot, topic config). The broker stays up, answers sends with a refusal code
and remark once it cannot store them, acknowledges nothing it did not store, and takes writes
again when space is freed.

Which of its writers meet the full disk, and how often one of them gets a little space back in
between, depends on timing (the index, for one, writes in batches). What must hold whatever the
timing: every error event names a writer that failed for lack of space, each writer logs one
event per failing spell (a spell ends only with its recovery event), and the store's writers
all log their recovery once space is freed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import subprocess
import time
from collections.abc import Iterator

import pytest
import trio

from protocol.codes import ResponseCode
from protocol.msgid import decode_offset_msg_id
from rmq_client.producer import ConnectionClosedError, Message, SendError, SendStatus, open_producer
from store.dispatch import ConsumeQueueTable
from tests.reliability.conftest import Daemon, read_records

FS_SIZE = 6 << 20
SEGMENT = 1 << 20
REFUSED = {ResponseCode.SYSTEM_ERROR, ResponseCode.SERVICE_NOT_AVAILABLE}
#: the error events of a writer that found no space, and the event that ends its failing spell
#: (None: it ends silently, so it is not checked)
SPELLS: dict[str, str | None] = {
    "disk_full": "disk_space_recovered",
    "checkpoint_write_failed": "checkpoint_write_recovered",
    "consume_queue_write_failed": "consume_queue_write_recovered",
    "index_build_failed": "index_build_recovered",
    "segment_creation_failed": "segment_creation_recovered",
    "config_persist_failed": "config_persist_recovered",
    "consumer_offsets_persist_failed": "consumer_offsets_persist_recovered",
    "delay_offsets_persist_failed": None,
}
#: writers that retry on their own once space is freed, whose recovery is awaited
STORE_WRITERS = (
    "disk_full",
    "checkpoint_write_failed",
    "consume_queue_write_failed",
    "index_build_failed",
)


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


def fill(path: pathlib.Path) -> int:
    """Write `path` until the file system refuses; the bytes written."""
    written = 0
    with open(path, "wb", buffering=0) as handle, contextlib.suppress(OSError):
        while True:
            written += handle.write(b"\1" * 4096)
    with contextlib.suppress(OSError), open(path, "ab", buffering=0) as handle:  # last page too
        while handle.write(b"\1"):
            written += 1
    return written


async def send_phase(
    port: int, topic_prefix: str, count: int, acked: dict[int, bytes], refused: list[SendError]
) -> None:
    with contextlib.suppress(ConnectionClosedError):  # the broker died: checked by the caller
        await _send_phase(port, topic_prefix, count, acked, refused)


async def _send_phase(
    port: int, topic_prefix: str, count: int, acked: dict[int, bytes], refused: list[SendError]
) -> None:
    async with open_producer("127.0.0.1", port, timeout_s=10) as client:
        for seq in range(count):
            body = f"{topic_prefix}-{seq:06d}".encode().ljust(900, b".")
            # a new topic every 50 messages: the broker must persist its topic table
            topic = f"{topic_prefix}{seq // 50}"
            try:
                result = await client.send(Message(topic, body))
            except SendError as exc:
                assert exc.code in REFUSED and exc.remark, exc
                refused.append(exc)
                continue
            assert result.status is SendStatus.SEND_OK
            acked[decode_offset_msg_id(result.offset_msg_id)[2]] = body


def spell_key(event: dict[str, object]) -> tuple[str, str]:
    """A failing spell is a writer's, and per file for the writers of several files."""
    kind = str(event["event"])
    recovered = {v: k for k, v in SPELLS.items() if v is not None}
    return recovered.get(kind, kind), str(event.get("file", ""))


def check_spells(events: list[dict[str, object]]) -> list[str]:
    """Every error event is a writer's on a full disk, and a writer logs one per failing spell;
    the kinds seen, sorted."""
    errors = [e for e in events if e.get("level") in ("error", "critical")]
    unexpected = [e for e in errors if e["event"] not in SPELLS]
    assert unexpected == [], f"errors that a full disk does not explain: {unexpected}"
    failing: set[tuple[str, str]] = set()
    ends = {v for v in SPELLS.values() if v is not None}
    kinds = [str(e["event"]) for e in events if e["event"] in SPELLS.keys() | ends]
    for event in events:
        key = spell_key(event)
        if event["event"] in SPELLS and SPELLS[str(event["event"])] is not None:
            assert key not in failing, f"{key} logged twice in one failing spell: {kinds}"
            failing.add(key)
        elif event["event"] in ends:
            failing.discard(key)
    return sorted({str(e["event"]) for e in errors})


def await_recoveries(daemon: Daemon, timeout_s: float = 30) -> None:
    """The store's writers that failed each log their recovery once space is back."""
    deadline = time.monotonic() + timeout_s
    while True:
        daemon.drain()
        failing: set[str] = set()
        for event in daemon.events:
            kind = str(event["event"])
            if kind in STORE_WRITERS:
                failing.add(kind)
            elif kind in SPELLS.values():
                failing.discard(spell_key(event)[0])
        if not failing:
            return
        assert time.monotonic() < deadline, f"{sorted(failing)} never recovered: {daemon.text()}"
        time.sleep(0.2)


def test_completely_full_file_system_refuses_stays_up_and_resumes(
    small_fs: pathlib.Path, daemons: list[Daemon]
) -> None:
    daemon = Daemon(
        small_fs / "store",
        "--flush-disk-type",
        "SYNC_FLUSH",
        env={
            "RMQ_MAPPED_FILE_SIZE_COMMIT_LOG": str(SEGMENT),
            "RMQ_CHECKPOINT_INTERVAL_MS": "100",
            "RMQ_DISK_CHECK_INTERVAL_MS": "200",
            "RMQ_ALLOCATE_RETRY_INTERVAL_MS": "200",
            # the refusals themselves are under test: no forced cleanup makes room
            "RMQ_CLEAN_FILE_FORCIBLY_ENABLE": "false",
        },
    )
    daemons.append(daemon)
    acked: dict[int, bytes] = {}
    refused: list[SendError] = []
    trio.run(send_phase, daemon.port, "Before", 100, acked, refused)
    assert not refused and daemon.process.poll() is None
    filler = small_fs / "filler"
    fill(filler)
    with pytest.raises(OSError) as full:
        (small_fs / "probe").write_bytes(b"x" * 8192)
    assert full.value.errno == errno.ENOSPC
    trio.run(send_phase, daemon.port, "Full", 2500, acked, refused)
    time.sleep(0.5)  # a few checkpoint rounds on the full disk
    assert daemon.process.poll() is None, f"the broker died on a full disk:\n{daemon.text()}"
    assert refused, "2.2 MB more into a full 6 MiB file system was never refused"
    os.unlink(filler)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(small_fs / "probe")
    resumed: list[SendError] = []
    deadline = time.monotonic() + 20
    before = len(acked)
    while len(acked) == before:
        assert time.monotonic() < deadline, "writes never resumed after space was freed"
        trio.run(send_phase, daemon.port, "After", 1, acked, resumed)
        time.sleep(0.2)
    assert daemon.process.poll() is None
    await_recoveries(daemon)
    kinds = check_spells(daemon.events)
    assert "disk_full" in kinds, "a completely full file system was never reported"
    assert daemon.stop() == 0
    stored = {r.physical_offset: r.body for r in read_records(small_fs / "store")}
    lost = [o for o, body in acked.items() if stored.get(o) != body]
    assert lost == []
    # the consume queues caught up once space was freed: each acknowledged message has its unit
    table = ConsumeQueueTable(str(small_fs / "store"))
    try:
        units = {
            unit.physical_offset
            for queue in table.queues.values()
            for unit in queue.read_units(queue.min_logic_offset, queue.max_logic_offset)
        }
    finally:
        table.close()
    assert sorted(set(acked) - units) == []
    print(f"full_disk acked={len(acked)} refused={len(refused)} error_events={kinds}")
