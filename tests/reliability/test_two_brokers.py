"""Two brokers on one store directory: the second refuses to start with a clear one-line message
and a non-zero exit, leaving the first serving and the store untouched; once the first dies (even
by SIGKILL, leaving its lock file behind) the next broker starts and serves."""

from __future__ import annotations

import pathlib

import trio

from rmq_client.producer import Message, SendStatus, open_producer
from tests.daemon import serve_refused
from tests.reliability.conftest import SEGMENT_SIZE, Daemon, read_records


async def send(port: int, count: int) -> None:
    async with open_producer("127.0.0.1", port) as client:
        for seq in range(count):
            result = await client.send(Message("Shared", b"m%d" % seq))
            assert result.status is SendStatus.SEND_OK


def test_second_broker_refuses_and_the_first_keeps_the_store(
    store_dir: pathlib.Path, daemons: list[Daemon]
) -> None:
    first = Daemon(store_dir, "--flush-disk-type", "SYNC_FLUSH")
    daemons.append(first)
    trio.run(send, first.port, 20)
    before = read_records(store_dir)
    second = serve_refused(
        store_dir,
        env={"RMQ_MAPPED_FILE_SIZE_COMMIT_LOG": str(SEGMENT_SIZE), "PATH": "/usr/bin:/bin"},
    )
    assert second.returncode != 0
    message = [line for line in second.stderr.splitlines() if "cannot start" in line]
    assert len(message) == 1, second.stderr
    assert "in use by another broker" in message[0] and str(store_dir / "lock") in message[0]
    assert "Traceback" not in second.stderr
    assert read_records(store_dir) == before
    assert (store_dir / "abort").exists(), "the refused broker must not touch the running store"
    trio.run(send, first.port, 5)  # the first still serves
    first.kill()
    assert (store_dir / "lock").exists()
    third = Daemon(store_dir, "--flush-disk-type", "SYNC_FLUSH")
    daemons.append(third)
    trio.run(send, third.port, 5)
    assert len(read_records(store_dir)) == 30
    assert third.stop() == 0
