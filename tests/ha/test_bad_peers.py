"""HA peers that misbehave, over real TCP against an in-process broker: each ends its
connection with one log event saying why, and the broker goes on (a slave reconnects)."""

from __future__ import annotations

import functools
import pathlib
import struct

import trio
from structlog.testing import capture_logs

from protocol.ha import REPORT, encode_report, encode_transfer
from tests.conftest import make_config, start_broker
from tests.store.conftest import wait_until


async def master_closes_after(tmp_path: pathlib.Path, sent: bytes) -> list[dict[str, object]]:
    """What the master logs about a fake slave that sends `sent`, then reads until closed."""
    async with trio.open_nursery() as nursery:
        master = await start_broker(nursery, make_config(tmp_path / "m"))
        try:
            ha = master.server.broker.ha
            assert ha is not None and ha.ha_port
            with capture_logs() as logs, trio.fail_after(10):
                stream = await trio.open_tcp_stream("127.0.0.1", ha.ha_port)
                async with stream:
                    await stream.send_all(sent)
                    while await stream.receive_some(65536):
                        pass  # frames until the master closes the connection
                await wait_until(lambda: any(e["event"] == "ha_slave_disconnected" for e in logs))
            return [dict(e) for e in logs if e["event"] == "ha_slave_disconnected"]
        finally:
            await master.stop()


async def test_a_negative_report_closes_the_connection(tmp_path: pathlib.Path) -> None:
    (event,) = await master_closes_after(tmp_path, REPORT.pack(-1))
    assert "bad report" in str(event["reason"]) and "negative" in str(event["reason"])


async def test_a_slave_ahead_of_the_master_is_refused(tmp_path: pathlib.Path) -> None:
    (event,) = await master_closes_after(tmp_path, encode_report(1 << 40))
    assert "outside the master's log" in str(event["reason"])


async def test_a_slave_refuses_a_frame_off_its_end_and_reconnects(
    tmp_path: pathlib.Path,
) -> None:
    """A fake master sends data for offset 4096 to an empty slave (which accepts only a segment
    start) and then 8 bytes at the wrong place; each connection ends, the slave comes back."""
    reports: list[int] = []
    connections = 0

    async def fake_master(stream: trio.SocketStream) -> None:
        nonlocal connections
        connections += 1
        first = await stream.receive_some(8)
        reports.append(struct.unpack(">q", first[:8])[0])
        await stream.send_all(encode_transfer(12345, b"x" * 10))  # not a segment start
        while await stream.receive_some(1024):
            pass

    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, fake_master, 0, host="127.0.0.1")
        listeners: list[trio.SocketListener] = await nursery.start(serve)
        port = listeners[0].socket.getsockname()[1]
        config = make_config(
            tmp_path / "s", broker_role="SLAVE", ha_master_address=f"127.0.0.1:{port}"
        )
        with capture_logs() as logs:
            slave = await start_broker(nursery, config)
            try:
                await wait_until(lambda: connections >= 2, 10)
            finally:
                await slave.stop()
        nursery.cancel_scope.cancel()
    gone = [e for e in logs if e["event"] == "ha_master_disconnected"]
    assert gone and "refused" in str(gone[0]["reason"]) and "12345" in str(gone[0]["reason"])
    assert reports[:2] == [0, 0]  # nothing was written: it reports its empty log again
