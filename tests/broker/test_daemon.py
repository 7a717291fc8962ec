"""`rmq-broker` as a real subprocess: serve, SIGTERM, health, send and inspect.

The daemon logs JSON lines on stderr (not a terminal here); the tests read the bound port from
its `listening` event, so it can listen on port 0.
"""

from __future__ import annotations

import json
import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
import trio

from broker.client import ConnectionClosedError, Message, SendError, open_producer
from store.reader import CommitLogReader

BROKER = [sys.executable, "-m", "broker"]


class Daemon:
    """A `rmq-broker serve` subprocess whose JSON log lines are collected as they come.

    A thread drains stderr all the time: a broker that logs into a full pipe would block.
    """

    def __init__(self, store_dir: pathlib.Path, *extra: str) -> None:
        self.store_dir = store_dir
        self.process = subprocess.Popen(
            [*BROKER, "serve", "--listen", "127.0.0.1:0", "--store-dir", str(store_dir), *extra],
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "RMQ_LOG_LEVEL": "info"},
        )
        self.events: list[dict[str, object]] = []
        self._lines: queue.Queue[dict[str, object] | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.port = int(str(self.wait_for("listening")["port"]))

    def _pump(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            try:
                record: dict[str, object] = json.loads(line)
            except json.JSONDecodeError:
                record = {"event": "text", "text": line.rstrip("\n")}
            self._lines.put(record)
        self._lines.put(None)

    def wait_for(self, event: str, timeout_s: float = 60) -> dict[str, object]:
        while (record := self._lines.get(timeout=timeout_s)) is not None:
            self.events.append(record)
            if record["event"] == event:
                return record
        raise AssertionError(f"daemon ended before {event!r}; saw {self.events}")

    def finish(self, timeout_s: float = 30) -> int:
        code = self.process.wait(timeout_s)
        while (record := self._lines.get(timeout=timeout_s)) is not None:
            self.events.append(record)
        return code


@pytest.fixture
def daemon(tmp_path: pathlib.Path) -> Iterator[Daemon]:
    running = Daemon(tmp_path / "store", "--flush-disk-type", "ASYNC_FLUSH")
    yield running
    if running.process.poll() is None:
        running.process.kill()
        running.process.wait()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BROKER, *args], capture_output=True, text=True, timeout=60, check=False)


async def test_sigterm_during_sends_loses_no_acknowledged_message(daemon: Daemon) -> None:
    acked: set[int] = set()
    sent_enough = trio.Event()

    async def sender(producer_index: int) -> None:
        async with open_producer("127.0.0.1", daemon.port, timeout_s=10) as producer:
            for index in range(10_000):
                try:
                    result = await producer.send(
                        Message("Term", b"%d-%d" % (producer_index, index))
                    )
                except (ConnectionClosedError, SendError):
                    return
                acked.add(int(result.offset_msg_id[-16:], 16))
                if len(acked) >= 300:
                    sent_enough.set()

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for producer_index in range(4):
                nursery.start_soon(sender, producer_index)
            await sent_enough.wait()
            daemon.process.send_signal(signal.SIGTERM)
        code = await trio.to_thread.run_sync(daemon.finish)
    assert code == 0
    events = [e["event"] for e in daemon.events]
    assert "signal_received" in events and events[-1] == "shutdown_complete"
    assert "store_closed" in events
    with CommitLogReader(str(daemon.store_dir)) as reader:
        stored = {r.physical_offset for r in reader.iter_records(reader.min_offset)}
    assert len(acked) >= 300
    assert acked <= stored
    assert not (daemon.store_dir / "abort").exists()


async def test_health_send_and_inspect(daemon: Daemon) -> None:
    address = f"127.0.0.1:{daemon.port}"
    health = await trio.to_thread.run_sync(run_cli, "health", "--addr", address)
    assert (health.returncode, health.stdout.strip()) == (0, "ok")
    sent = await trio.to_thread.run_sync(
        run_cli, "send", "--namesrv", address, "--topic", "Quick", "--count", "25", "--size", "64"
    )
    assert sent.returncode == 0, sent.stderr
    summary = json.loads(sent.stdout)
    assert (summary["sent"], summary["failed"], summary["broker"]) == (25, 0, address)
    daemon.process.send_signal(signal.SIGTERM)
    assert await trio.to_thread.run_sync(daemon.finish) == 0
    out = await trio.to_thread.run_sync(
        run_cli, "inspect", "--store-dir", str(daemon.store_dir), "--topic", "Quick", "--body"
    )
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(lines) == 25
    assert sorted(line["keys"] for line in lines) == sorted(f"quick-{i}" for i in range(25))
    assert all(line["body_length"] == 64 and line["crc_ok"] for line in lines)
    assert [line["queue_offset"] for line in lines if line["queue_id"] == 0] == list(
        range(sum(1 for line in lines if line["queue_id"] == 0))
    )
    second = lines[1]["physical_offset"]
    resumed = await trio.to_thread.run_sync(
        run_cli, "inspect", "--store-dir", str(daemon.store_dir), "--from-offset", str(second - 3)
    )
    assert json.loads(resumed.stdout.splitlines()[0])["physical_offset"] == second


def test_health_fails_without_a_broker() -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run_cli("health", "--addr", f"127.0.0.1:{port}", "--timeout", "2")
    assert result.returncode == 1
    assert result.stderr.startswith("unhealthy: ")
