"""What ASYNC_FLUSH risks: kill the daemon under load and compare its durable offset with what it
acknowledged. A SIGKILL loses nothing (the page cache survives the process), but a power cut
would lose everything past the durable offset; the flush schedule bounds that: once the load
pauses, everything acknowledged becomes durable with no further write (what a kill right after a
new burst leaves past the durable offset is printed), and the restart after the SIGKILL serves
every acknowledged record. The waits have generous deadlines; the exact schedule is checked on a
mock clock in tests/store/test_flush.py."""

from __future__ import annotations

import os
import pathlib
import signal
import time

import pytest
import trio

from protocol.msgid import decode_offset_msg_id
from rmq_client.producer import Message, SendStatus, open_producer
from store.checkpoint import FLUSH_OFFSET_FILE, FLUSH_OFFSET_LAYOUT
from store.reader import CommitLogReader
from tests.daemon import Daemon

FLUSH_INTERVAL_MS = 100
THOROUGH_INTERVAL_MS = 300
MESSAGES = 300
BURST = 50
RECORD = 1024 + 200  # a 1 KiB body and its record header, at most
DEADLINE_S = 60.0


def durable(store_dir: pathlib.Path) -> int:
    data = (store_dir / FLUSH_OFFSET_FILE).read_bytes()
    return int(FLUSH_OFFSET_LAYOUT.unpack_from(data)[0])


async def load(port: int, count: int, acks: list[int]) -> None:
    """Send `count` 1 KiB messages; record the physical offset of each."""
    async with open_producer("127.0.0.1", port, timeout_s=DEADLINE_S) as client:
        for _ in range(count):
            result = await client.send(Message("AsyncRisk", b"r" * 1024))
            assert result.status is SendStatus.SEND_OK
            acks.append(decode_offset_msg_id(result.offset_msg_id)[2])


def wait_durable(store_dir: pathlib.Path, offset: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while durable(store_dir) <= offset:
        assert time.monotonic() < deadline, f"{offset} never became durable"
        time.sleep(0.02)


def test_async_flush_risk_stays_within_the_flush_schedule(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RMQ_FLUSH_INTERVAL_COMMIT_LOG_MS", str(FLUSH_INTERVAL_MS))
    monkeypatch.setenv("RMQ_FLUSH_COMMIT_LOG_THOROUGH_INTERVAL_MS", str(THOROUGH_INTERVAL_MS))
    # 1 MiB segments: an abnormal restart scans a segment's tail for bytes to cut, a 1 GiB
    # default segment takes tens of seconds
    monkeypatch.setenv("RMQ_MAPPED_FILE_SIZE_COMMIT_LOG", str(1 << 20))
    store_dir = tmp_path / "store"
    daemon = Daemon(store_dir, "--flush-disk-type", "ASYNC_FLUSH")
    settled: list[int] = []
    trio.run(load, daemon.port, MESSAGES, settled)
    # the load pauses: the flush rounds make all of it durable, with nothing written after it
    wait_durable(store_dir, max(settled))
    at_risk: list[int] = []
    trio.run(load, daemon.port, BURST, at_risk)
    os.kill(daemon.process.pid, signal.SIGKILL)
    daemon.process.wait(10)
    after_kill = durable(store_dir)
    assert max(settled) < after_kill  # `offset` is a record's start
    exposed = max(0, max(at_risk) + RECORD - after_kill)  # what a power cut now would lose
    # A SIGKILL loses nothing: the restarted broker serves every acknowledged record.
    restarted = Daemon(store_dir, "--flush-disk-type", "ASYNC_FLUSH")
    assert restarted.stop() == 0
    with CommitLogReader(str(store_dir)) as reader:
        stored = {r.physical_offset for r in reader.iter_records(reader.min_offset)}
    assert set(settled + at_risk) <= stored
    print(f"async_flush acknowledged={MESSAGES + BURST} at_risk_bytes={exposed}")
