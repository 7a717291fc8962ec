"""A store on a real size-limited file system (tmpfs) that fills up completely while the daemon
runs: not only the next segment, but every small file the store and broker rewrite (checkpoint,
topic-queue table snapshot, topic config). The broker stays up, answers sends with a refusal code
and remark once it cannot store them, acknowledges nothing it did not store, logs the condition
once, and takes writes again when space is freed.
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
    daemon.drain()
    full_events = [e for e in daemon.events if e.get("level") in ("error", "critical")]
    kinds = sorted({str(e["event"]) for e in full_events})
    assert all(sum(1 for e in full_events if e["event"] == k) == 1 for k in kinds), kinds
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
