"""Limits the broker keeps for itself: open files raised to the hard limit at start, no more
than `max_connections` connections at once, the rest closed as soon as they are accepted, and
a broker out of descriptors that waits and accepts again."""

from __future__ import annotations

import pathlib
import resource
import socket
import subprocess

import trio
from structlog.testing import capture_logs

from rmq_client.blocking import BlockingProducer
from rmq_client.producer import ConnectionClosedError, Message, open_producer
from tests.conftest import make_config, start_broker
from tests.daemon import BROKER, Daemon
from tests.store.conftest import wait_until


def test_the_open_files_soft_limit_is_raised_to_the_hard_limit(tmp_path: pathlib.Path) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(256, hard)

    def lower() -> None:  # what a shell with `ulimit -Sn 256` hands the broker
        resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))

    process = subprocess.Popen(
        [*BROKER, "serve", "--listen", "127.0.0.1:0", "--store-dir", str(tmp_path / "store")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lower,  # noqa: PLW1509 - only setrlimit, before exec
    )
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if '"listening"' in line:
                break
        limits = pathlib.Path(f"/proc/{process.pid}/limits").read_text()
    finally:
        process.terminate()
        process.wait(30)
    row = next(line for line in limits.splitlines() if line.startswith("Max open files"))
    soft_now = int(row.split()[3])
    assert soft_now == hard, row


async def test_connections_past_the_limit_are_closed_at_once(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_broker(nursery, make_config(tmp_path / "store", max_connections=2))
    server = broker.server
    with capture_logs() as logs, trio.fail_after(20):
        async with (
            open_producer("127.0.0.1", broker.port) as first,
            open_producer("127.0.0.1", broker.port) as second,
        ):
            await first.heartbeat()
            await second.heartbeat()
            for _ in range(3):
                async with open_producer("127.0.0.1", broker.port) as third:
                    try:
                        await third.heartbeat()
                    except ConnectionClosedError:
                        continue
                    raise AssertionError("a third connection was served")
            await first.heartbeat()  # the open ones are unaffected
        await wait_until(lambda: not server.connections)
        async with open_producer("127.0.0.1", broker.port) as again:
            await again.heartbeat()
    assert server.refused_connections == 3
    events = [e["event"] for e in logs if "connection" in e["event"]]
    assert events.count("connection_refused") == 1  # one event for the spell
    assert "connections_accepted_again" in events
    await broker.stop()


#: the open-files limit (soft and hard) of the broker that runs out of descriptors
FD_LIMIT = 64


def test_running_out_of_descriptors_while_accepting(tmp_path: pathlib.Path) -> None:
    """A broker at its open-files limit (hard and soft: it cannot raise it) logs one
    `accept_failed` for the spell, serves the connections it has, and accepts the waiting
    ones once descriptors are free again."""

    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))

    daemon = Daemon(tmp_path / "store", preexec_fn=low)
    try:
        limits = pathlib.Path(f"/proc/{daemon.process.pid}/limits").read_text()
        assert f"{FD_LIMIT}" in next(r for r in limits.splitlines() if "Max open files" in r)
        clients: list[socket.socket] = []
        with BlockingProducer("127.0.0.1", daemon.port) as first:
            first.send(Message("Fd", b"before", queue_id=0))  # its files are open from now on
            for _ in range(FD_LIMIT + 16):  # more than the broker has descriptors for
                clients.append(socket.create_connection(("127.0.0.1", daemon.port), timeout=10))
            failed = daemon.wait_for("accept_failed", timeout_s=30)
            assert failed["error"] == "EMFILE", failed
            # the connection it has is served; the broker is up
            assert first.send(Message("Fd", b"during", queue_id=0)).queue_offset == 1
            for client in clients:
                client.close()
            resumed = daemon.wait_for("accept_resumed", timeout_s=30)
            assert int(str(resumed["attempts"])) >= 1
        with BlockingProducer("127.0.0.1", daemon.port) as again:
            assert again.send(Message("Fd", b"after", queue_id=0)).queue_offset == 2
    finally:
        code = daemon.stop()
    assert code == 0, daemon.text()
    assert daemon.count("accept_failed") == 1  # one event for the spell
    assert daemon.count("text") == 0, daemon.text()  # nothing but structured events
