"""What a cut during segment creation leaves: `create_segment_file` creates `<offset>.creating`,
sizes and fsyncs it, renames it into place and fsyncs the directory. When the directory was
fsynced after the create (by another segment's creation or removal) but the cut came before the
rename was made durable, a `.creating` file survives, 0 bytes or full size. Startup removes
them; the log, and the creation of that segment later, are not disturbed."""

from __future__ import annotations

import os
import pathlib

import trio

from protocol.msgid import decode_offset_msg_id
from rmq_client.producer import Message, SendStatus, open_producer
from tests.powercut.mount import PowerCutFS
from tests.reliability.acks import Ack, check_acknowledged
from tests.reliability.conftest import SEGMENT_SIZE, Daemon, read_records

SYNC = ("--flush-disk-type", "SYNC_FLUSH")


async def send(port: int, count: int, tag: str, acks: dict[int, Ack]) -> None:
    async with open_producer("127.0.0.1", port) as client:
        for seq in range(count):
            body = f"{tag}-{seq:05d}-".encode().ljust(900, b"x")
            sent = await client.send(Message("Leftover", body))
            assert sent.status is SendStatus.SEND_OK
            offset = decode_offset_msg_id(sent.offset_msg_id)[2]
            acks[offset] = Ack(offset, "Leftover", sent.queue_id, sent.queue_offset, body)


def leave_creating(commitlog: pathlib.Path, offset: int, size: int) -> pathlib.Path:
    """A `.creating` file of `size` bytes whose directory entry is durable, content synced."""
    path = commitlog / f"{offset:020d}.creating"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)
    dir_fd = os.open(commitlog, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def test_startup_removes_segments_whose_creation_a_cut_interrupted(
    powercut: PowerCutFS, brokers: list[Daemon]
) -> None:
    store_dir = powercut.mountpoint / "store"
    commitlog = store_dir / "commitlog"
    acks: dict[int, Ack] = {}
    daemon = Daemon(store_dir, *SYNC)
    brokers.append(daemon)
    trio.run(send, daemon.port, 20, "before", acks)
    daemon.kill()
    segments = sorted(p.name for p in commitlog.iterdir())
    after_last = int(segments[-1]) + SEGMENT_SIZE
    leftovers = [
        leave_creating(commitlog, after_last, 0),  # cut before it was sized
        leave_creating(commitlog, after_last + SEGMENT_SIZE, SEGMENT_SIZE),  # before the rename
    ]
    powercut.cut()
    powercut.mount()
    assert all(path.exists() for path in leftovers), "the cut should have kept the leftovers"

    daemon = Daemon(store_dir, *SYNC)
    brokers.append(daemon)
    assert not any(path.exists() for path in leftovers)
    assert daemon.count("segment_creation_leftover_removed") == 2, daemon.text()
    # the log goes on into the segments those leftovers were for
    trio.run(send, daemon.port, 250, "after", acks)
    assert max(acks) >= after_last + SEGMENT_SIZE
    check_acknowledged(read_records(store_dir), acks)
    assert daemon.stop() == 0
    assert not list(commitlog.glob("*.creating"))
