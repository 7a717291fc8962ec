"""Limits the broker keeps for itself: open files raised to the hard limit at start, and no more
than `max_connections` connections at once, the rest closed as soon as they are accepted."""

from __future__ import annotations

import pathlib
import resource
import subprocess

import trio
from structlog.testing import capture_logs

from broker.client import ConnectionClosedError, open_producer
from tests.conftest import make_config, start_broker
from tests.daemon import BROKER
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
