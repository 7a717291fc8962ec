"""Real master and slave processes on loopback: the slave's commit log is the master's byte for
byte; an empty slave starts at the master's last segment; SYNC_MASTER's answers with no slave
(SLAVE_NOT_AVAILABLE) and with a slave that stopped reporting (FLUSH_SLAVE_TIMEOUT)."""

from __future__ import annotations

import pathlib
import signal

import trio

from rmq_client.producer import Message, SendStatus, open_producer
from tests.ha.conftest import Daemon, segment_bytes, start_master, start_slave
from tests.reliability.conftest import SEGMENT_SIZE


async def send_many(port: int, count: int, size: int = 300) -> list[SendStatus]:
    statuses = []
    async with open_producer("127.0.0.1", port, timeout_s=10) as client:
        for i in range(count):
            body = (b"%06d" % i) * (size // 6)
            statuses.append((await client.send(Message(f"HaTopic{i % 3}", body))).status)
    return statuses


async def test_slave_commit_log_is_the_masters_byte_for_byte(
    tmp_path: pathlib.Path, daemons: list[Daemon]
) -> None:
    master, ha_port = start_master(tmp_path / "master", daemons)
    slave = start_slave(tmp_path / "slave", daemons, ha_port)
    with trio.fail_after(60):
        # ~ 3.5 segments of 64 KiB: rollovers and end-of-file blanks travel too
        statuses = await send_many(master.port, 700)
    assert set(statuses) == {SendStatus.SEND_OK}  # each one acknowledged by the slave
    assert slave.stop() == 0
    assert master.stop() == 0
    copied = segment_bytes(tmp_path / "slave")
    assert len(copied) >= 4
    assert copied == segment_bytes(tmp_path / "master")


async def test_an_empty_slave_starts_at_the_masters_last_segment(
    tmp_path: pathlib.Path, daemons: list[Daemon]
) -> None:
    master, ha_port = start_master(
        tmp_path / "master", daemons, {"RMQ_BROKER_ROLE": "ASYNC_MASTER"}
    )
    with trio.fail_after(60):
        await send_many(master.port, 500)
    slave = start_slave(tmp_path / "slave", daemons, ha_port)
    started = master.event("ha_transfer_started")
    assert int(str(started["offset"])) % SEGMENT_SIZE == 0 and int(str(started["offset"])) > 0
    with trio.fail_after(60):
        await send_many(master.port, 200)
        # ASYNC_MASTER: the answers did not wait for the slave; it catches up on its own
        first = f"{int(str(started['offset'])):020d}"
        while True:
            mastered = segment_bytes(tmp_path / "master")
            mastered = {name: data for name, data in mastered.items() if name >= first}
            copied = segment_bytes(tmp_path / "slave")
            if copied == mastered:
                break
            await trio.sleep(0.1)
    assert slave.stop() == 0
    assert master.stop() == 0
    copied = segment_bytes(tmp_path / "slave")
    assert min(copied) == first
    assert copied == {n: d for n, d in segment_bytes(tmp_path / "master").items() if n >= first}


async def test_sync_master_without_a_slave_answers_slave_not_available(
    tmp_path: pathlib.Path, daemons: list[Daemon]
) -> None:
    master, _ = start_master(tmp_path / "master", daemons)
    with trio.fail_after(30):
        assert await send_many(master.port, 3) == [SendStatus.SLAVE_NOT_AVAILABLE] * 3


async def test_a_slave_that_stops_reporting_gets_flush_slave_timeout(
    tmp_path: pathlib.Path, daemons: list[Daemon]
) -> None:
    master, ha_port = start_master(
        tmp_path / "master", daemons, {"RMQ_SYNC_FLUSH_TIMEOUT_MS": "500"}
    )
    slave = start_slave(tmp_path / "slave", daemons, ha_port)
    with trio.fail_after(60):
        assert await send_many(master.port, 2) == [SendStatus.SEND_OK] * 2
        slave.process.send_signal(signal.SIGSTOP)
        try:
            assert await send_many(master.port, 2) == [SendStatus.FLUSH_SLAVE_TIMEOUT] * 2
        finally:
            slave.process.send_signal(signal.SIGCONT)
        assert await send_many(master.port, 2) == [SendStatus.SEND_OK] * 2
