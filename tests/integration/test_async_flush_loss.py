"""What ASYNC_FLUSH risks: kill the daemon under load and compare its durable offset with what it
acknowledged. A SIGKILL loses nothing (the page cache survives the process), but a power cut
would lose everything past the durable offset; the flush schedule bounds that: every message
acknowledged longer than one thorough flush interval (plus scheduling slack) before the kill
must already be durable."""

from __future__ import annotations

import os
import pathlib
import signal
import time

import pytest
import trio

from broker.client import Message, SendStatus, open_producer
from protocol.msgid import decode_offset_msg_id
from store.checkpoint import FLUSH_OFFSET_FILE, FLUSH_OFFSET_LAYOUT
from tests.daemon import Daemon

FLUSH_INTERVAL_MS = 100
THOROUGH_INTERVAL_MS = 300
SLACK_S = 1.0
LOAD_S = 2.5


async def load(port: int, acks: list[tuple[float, int]]) -> None:
    """Send 1 KiB messages for LOAD_S; record (ack time, end offset of the record)."""
    async with open_producer("127.0.0.1", port) as client:
        deadline = time.monotonic() + LOAD_S
        while time.monotonic() < deadline:
            result = await client.send(Message("AsyncRisk", b"r" * 1024))
            assert result.status is SendStatus.SEND_OK
            offset = decode_offset_msg_id(result.offset_msg_id)[2]
            acks.append((time.monotonic(), offset))


def test_async_flush_risk_stays_within_the_flush_schedule(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RMQ_FLUSH_INTERVAL_COMMIT_LOG_MS", str(FLUSH_INTERVAL_MS))
    monkeypatch.setenv("RMQ_FLUSH_COMMIT_LOG_THOROUGH_INTERVAL_MS", str(THOROUGH_INTERVAL_MS))
    store_dir = tmp_path / "store"
    daemon = Daemon(store_dir, "--flush-disk-type", "ASYNC_FLUSH")
    acks: list[tuple[float, int]] = []
    trio.run(load, daemon.port, acks)
    killed_at = time.monotonic()
    os.kill(daemon.process.pid, signal.SIGKILL)
    daemon.process.wait(10)
    durable = FLUSH_OFFSET_LAYOUT.unpack_from((store_dir / FLUSH_OFFSET_FILE).read_bytes())[0]
    assert len(acks) > 100
    last_offset = acks[-1][1]
    settled = [
        offset for at, offset in acks if killed_at - at > THOROUGH_INTERVAL_MS / 1e3 + SLACK_S
    ]
    assert settled, "the load was too short to have settled messages"
    # `offset` is a record's start; the record after it starts at or before `durable`.
    assert max(settled) < durable
    at_risk = max(0, last_offset - durable)
    print(f"async_flush acknowledged={len(acks)} at_risk_bytes={at_risk} durable={durable}")
