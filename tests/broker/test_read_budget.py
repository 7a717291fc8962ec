"""Partial frames across connections stay within `max_buffered_bytes`, and a frame trickled
slower than `idle_timeout_s` closes its connection; whole frames on other connections go on."""

from __future__ import annotations

import pathlib
import struct

import trio
from structlog.testing import capture_logs

from broker.read_budget import ReadBudget
from rmq_client.producer import Message, open_producer
from tests.conftest import make_config, start_broker
from tests.store.conftest import wait_until

MIB = 1 << 20


def test_the_connection_holding_the_most_is_stopped() -> None:
    budget = ReadBudget(100)
    stopped: list[tuple[str, str]] = []
    budget.update(1, 40, lambda reason: stopped.append(("one", reason)))
    budget.update(2, 50, lambda reason: stopped.append(("two", reason)))
    budget.update(1, 30, lambda reason: stopped.append(("one", reason)))  # it shrank
    assert (budget.total, stopped) == (80, [])
    budget.update(3, 25, lambda reason: stopped.append(("three", reason)))
    assert stopped == [("two", "read_budget")] and budget.total == 55
    budget.release(1)
    budget.update(3, 0, lambda reason: None)
    assert budget.total == 0 and budget.stopped == 1


async def partial_frame(port: int, announced: int, sent: int) -> trio.SocketStream:
    """A connection that announced a frame of `announced` bytes and sent `sent` of them."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(struct.pack(">i", announced) + b"\0" * (sent - 4))
    return stream


async def closed_by_peer(stream: trio.SocketStream) -> bool:
    with trio.move_on_after(10):
        try:
            return await stream.receive_some(1024) == b""
        except trio.BrokenResourceError:
            return True
    return False


async def test_partial_frames_past_the_budget_close_the_largest(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    config = make_config(tmp_path / "store", max_frame_length=2 * MIB, max_buffered_bytes=2 * MIB)
    broker = await start_broker(nursery, config)
    budget = broker.server.broker.read_budget
    with capture_logs() as logs:
        small = await partial_frame(broker.port, MIB, 400_000)
        large = await partial_frame(broker.port, 2 * MIB - 8, 900_000)
        await wait_until(lambda: budget.total >= 1_300_000)
        third = await partial_frame(broker.port, MIB, 800_000)  # 2.1 MB in all: over
        assert await closed_by_peer(large)
        assert budget.total <= 2 * MIB
        async with open_producer("127.0.0.1", broker.port) as producer:  # others go on
            assert (await producer.send(Message("Budget", b"whole"))).queue_offset == 0
    events = [e for e in logs if e["event"] == "read_budget_exceeded"]
    assert len(events) == 1 and events[0]["held"] > 800_000
    for stream in (small, third):
        await stream.aclose()
    await broker.stop()


async def test_a_trickled_frame_closes_its_connection(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_broker(nursery, make_config(tmp_path / "store", idle_timeout_s=0.5))
    with capture_logs() as logs:
        stream = await partial_frame(broker.port, 1000, 8)
        started = trio.current_time()
        with trio.fail_after(10):
            try:
                while True:  # a byte every 100 ms: never idle, never a whole frame
                    await stream.send_all(b"\0")
                    await trio.sleep(0.1)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        assert trio.current_time() - started >= 0.5
    assert [e for e in logs if e["event"] == "frame_timeout"]
    await broker.stop()
