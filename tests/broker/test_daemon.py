"""`rmq-broker` as a real subprocess: serve, SIGTERM, health, send and inspect.

The daemon logs JSON lines on stderr (not a terminal here); the tests read the bound port from
its `listening` event, so it can listen on port 0.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
from collections.abc import AsyncIterator, Iterator
from typing import NoReturn

import pytest
import structlog
import trio

from rmq_client.producer import ConnectionClosedError, Message, SendError, open_producer
from store.reader import CommitLogReader
from tests.daemon import Daemon, run_cli


@pytest.fixture
def daemon(tmp_path: pathlib.Path) -> Iterator[Daemon]:
    running = Daemon(tmp_path / "store", "--flush-disk-type", "ASYNC_FLUSH")
    yield running
    if running.process.poll() is None:
        running.process.kill()
        running.process.wait()


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


async def test_a_second_signal_exits_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from broker import cli

    exits: list[int] = []
    shutdowns: list[int] = []

    def fake_exit(code: int) -> NoReturn:
        exits.append(code)
        raise SystemExit(code)

    async def two_signals() -> AsyncIterator[int]:
        yield signal.SIGTERM
        assert shutdowns == [1] and exits == []  # the first one only starts the shutdown
        yield signal.SIGINT

    monkeypatch.setattr(os, "_exit", fake_exit)
    with pytest.raises(SystemExit):
        await cli._watch_signals(two_signals(), lambda: shutdowns.append(1))
    assert exits == [cli.EXIT_SECOND_SIGNAL] and shutdowns == [1]


async def test_a_signal_before_the_broker_listens_stops_the_startup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from broker import cli, server
    from broker.config import BrokerConfig

    entered = trio.Event()

    async def recovering_forever(config: BrokerConfig, *, task_status: object) -> None:
        entered.set()
        await trio.sleep_forever()  # a long recovery: `task_status.started` never comes

    async def one_signal() -> AsyncIterator[int]:
        await entered.wait()
        yield signal.SIGTERM
        await trio.sleep_forever()

    monkeypatch.setattr(server, "serve", recovering_forever)
    with structlog.testing.capture_logs() as events, trio.fail_after(5):
        await cli._serve_until_signalled(BrokerConfig(), one_signal())
    assert [e["event"] for e in events] == ["signal_received", "startup_abandoned"]
