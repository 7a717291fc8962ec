"""Pop state survives a kill -9 of a real broker process: a receipt handed out before the kill
still names a message in flight after the restart, what was popped is not handed out again
while it is invisible, unacknowledged messages come back once their time is up and acknowledged
ones never do; a FIFO queue stays blocked by its message in flight, and a FIFO message's
delivery count goes on from where it was. The state is only what the revive topic, the offsets
file and the FIFO counts' file hold."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator

import pytest
import trio

from rmq_client.producer import Message, open_producer
from tests.daemon import Daemon
from tests.pop.client import Popped, ack, change_invisible, order_pop_until, pop

GROUP = "pop-restart"
TOPIC = "PopRestart"
FIFO = "PopRestartFifo"


@pytest.fixture
def store_dir(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    yield tmp_path / "store"


def _start(
    store_dir: pathlib.Path, started: list[Daemon], env: dict[str, str] | None = None
) -> Daemon:
    daemon = Daemon(store_dir, "--flush-disk-type", "ASYNC_FLUSH", env=env)
    started.append(daemon)
    return daemon


async def test_in_flight_pops_survive_a_kill_9(store_dir: pathlib.Path) -> None:
    started: list[Daemon] = []
    try:
        await _run(store_dir, started)
    finally:
        for daemon in started:
            if daemon.process.poll() is None:
                daemon.process.kill()
                daemon.process.wait()


async def _run(store_dir: pathlib.Path, started: list[Daemon]) -> None:
    first = _start(store_dir, started)
    async with open_producer("127.0.0.1", first.port) as conn:
        for body in (b"m1", b"m2", b"m3", b"m4"):
            await conn.send(Message(TOPIC, body, queue_id=0))
        short = await pop(conn, GROUP, TOPIC, invisible_ms=2_000)
        assert [m.body for m in short] == [b"m1", b"m2", b"m3", b"m4"]
        await ack(conn, GROUP, TOPIC, short[0])
        await ack(conn, GROUP, TOPIC, short[1])
        await conn.send(Message(TOPIC, b"long", queue_id=0))
        [long] = await pop(conn, GROUP, TOPIC, invisible_ms=600_000)
        for body in (b"f1", b"f2"):
            await conn.send(Message(FIFO, body, queue_id=0))
        [fifo] = await pop(conn, GROUP, FIFO, queue_id=0, max_nums=1, order=True)
        assert fifo.body == b"f1"
    first.kill()

    second = _start(store_dir, started)
    assert second.event("pop_replayed")["inflight"] == 3
    async with open_producer("127.0.0.1", second.port) as conn:
        # the receipt of before the kill still names a message in flight
        await change_invisible(conn, GROUP, TOPIC, long, 600_000)
        back: list[Popped] = []
        with trio.fail_after(30):
            while len(back) < 2:
                back += await pop(conn, GROUP, TOPIC, invisible_ms=600_000)
                await trio.sleep(0.1)
        assert sorted(m.body for m in back) == [b"m3", b"m4"]
        assert all(m.record.reconsume_times == 1 for m in back)
        await trio.sleep(2.5)  # past every short invisible time, twice the revive round
        assert await pop(conn, GROUP, TOPIC) == []  # m1, m2 acked; long still invisible
        for message in back:
            await ack(conn, GROUP, TOPIC, message)
        # FIFO: f2 still waits for f1, whose receipt of before the kill acknowledges it
        assert await pop(conn, GROUP, FIFO, queue_id=0, order=True) == []
        await ack(conn, GROUP, FIFO, fifo)
        [after] = await pop(conn, GROUP, FIFO, queue_id=0, order=True)
        assert after.body == b"f2"
    assert second.stop() == 0


async def test_a_fifo_messages_delivery_count_survives_a_kill_9(store_dir: pathlib.Path) -> None:
    """Handed out twice and never acknowledged before the kill: after the restart its next
    delivery is its third (count 2), not a first one again, so retryMaxTimes still holds."""
    started: list[Daemon] = []
    env = {"RMQ_FLUSH_CONSUMER_OFFSET_INTERVAL_MS": "100"}
    try:
        first = _start(store_dir, started, env)
        async with open_producer("127.0.0.1", first.port) as conn:
            await conn.send(Message(FIFO, b"f", queue_id=0))
            assert await order_pop_until(conn, GROUP, FIFO, 10) == (b"f", "0 qo0%0 0")
            assert await order_pop_until(conn, GROUP, FIFO, 10) == (b"f", "0 qo0%0 1")
        await trio.sleep(0.5)  # the counts' file is written every 100 ms
        first.kill()
        second = _start(store_dir, started, env)
        async with open_producer("127.0.0.1", second.port) as conn:
            assert await order_pop_until(conn, GROUP, FIFO, 10) == (b"f", "0 qo0%0 2")
            [last] = await pop(conn, GROUP, FIFO, queue_id=0, order=True, poll_ms=5_000)
            assert last.body == b"f"
            await ack(conn, GROUP, FIFO, last)
        assert second.stop() == 0
        # acknowledged: its count is gone from the file the graceful stop wrote
        written = (store_dir / "config" / "popOrderAttempts.json").read_text()
        assert json.loads(written) == {"orderAttempts": []}
    finally:
        for daemon in started:
            if daemon.process.poll() is None:
                daemon.process.kill()
                daemon.process.wait()
