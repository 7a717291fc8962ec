"""SYNC_FLUSH when fdatasync fails (the power-cut file system answers EIO): nothing is
acknowledged from then on, every client sees an error code, the store stops taking writes and
says why; after a cut and a restart on a disk that works again, everything acknowledged before
the failure is there and sends are accepted again."""

from __future__ import annotations

import trio

from protocol.codes import ResponseCode
from protocol.msgid import decode_offset_msg_id
from rmq_client.producer import Message, SendError, SendStatus, open_producer
from tests.powercut.mount import PowerCutFS
from tests.reliability.acks import Ack, check_acknowledged
from tests.reliability.conftest import SEGMENT_SIZE, Daemon, read_records

SYNC = ("--flush-disk-type", "SYNC_FLUSH")


async def send_ok(port: int, count: int, tag: str, acks: dict[int, Ack]) -> None:
    async with open_producer("127.0.0.1", port) as client:
        for seq in range(count):
            body = f"{tag}-{seq:04d}".encode() * 10
            sent = await client.send(Message("Eio", body))
            assert sent.status is SendStatus.SEND_OK
            offset = decode_offset_msg_id(sent.offset_msg_id)[2]
            acks[offset] = Ack(offset, "Eio", sent.queue_id, sent.queue_offset, body)


async def send_refused(port: int, count: int) -> list[int]:
    """Send `count` messages on separate connections at once; the error code of each (none may
    be acknowledged)."""
    codes: list[int] = []

    async def one(seq: int) -> None:
        async with open_producer("127.0.0.1", port, timeout_s=30) as client:
            try:
                sent = await client.send(Message("Eio", f"refused-{seq}".encode()))
            except SendError as exc:
                codes.append(exc.code)
                return
            raise AssertionError(f"acknowledged while fdatasync fails: {sent}")

    async with trio.open_nursery() as nursery:
        for seq in range(count):
            nursery.start_soon(one, seq)
    return codes


def test_failing_fdatasync_acknowledges_nothing_and_a_restart_recovers(
    powercut: PowerCutFS, brokers: list[Daemon]
) -> None:
    store_dir = powercut.mountpoint / "store"
    daemon = Daemon(store_dir, *SYNC)
    brokers.append(daemon)
    acks: dict[int, Ack] = {}
    trio.run(send_ok, daemon.port, 30, "before", acks)
    powercut.set_eio(True)
    codes = trio.run(send_refused, daemon.port, 8)
    assert len(codes) == 8
    assert set(codes) == {ResponseCode.SERVICE_NOT_AVAILABLE}, codes
    failed = daemon.event("commit_log_flush_failed")
    assert "Input/output error" in str(failed["error"]), failed
    # later sends are refused at once, without touching the disk
    assert trio.run(send_refused, daemon.port, 2) == [ResponseCode.SERVICE_NOT_AVAILABLE] * 2
    assert powercut.set_eio(False) >= 1
    assert daemon.process.poll() is None, "the broker must keep serving (reads) after the failure"

    daemon.kill()
    powercut.cut()
    powercut.mount()
    daemon = Daemon(store_dir, *SYNC)
    brokers.append(daemon)
    check_acknowledged(read_records(store_dir), acks)
    trio.run(send_ok, daemon.port, 30, "after", acks)
    check_acknowledged(read_records(store_dir), acks)
    assert daemon.stop() == 0


async def send_until_refused(port: int, limit: int, acks: dict[int, Ack]) -> SendError:
    """Send 1 KiB messages until one is refused (within `limit` sends); that refusal."""
    async with open_producer("127.0.0.1", port, timeout_s=30) as client:
        for seq in range(limit):
            body = f"dir-eio-{seq:05d}-".encode().ljust(1024, b"d")
            try:
                sent = await client.send(Message("Eio", body))
            except SendError as exc:
                return exc
            assert sent.status is SendStatus.SEND_OK
            offset = decode_offset_msg_id(sent.offset_msg_id)[2]
            acks[offset] = Ack(offset, "Eio", sent.queue_id, sent.queue_offset, body)
    raise AssertionError(f"{limit} sends accepted while no segment could be created")


def test_failing_directory_fsync_stops_at_the_next_segment_and_recovers_without_restart(
    powercut: PowerCutFS, brokers: list[Daemon]
) -> None:
    """A segment is only usable once its name is durable: while fsyncing commitlog/ fails, the
    log runs up to the end of the segments it has, then sends are refused with a code; once the
    directory can be synced again the retried creation succeeds and sends are accepted, all
    without a restart; a cut then loses nothing acknowledged."""
    store_dir = powercut.mountpoint / "store"
    daemon = Daemon(store_dir, *SYNC)
    brokers.append(daemon)
    acks: dict[int, Ack] = {}
    trio.run(send_ok, daemon.port, 10, "before", acks)
    powercut.set_eio(False, dirs=True)
    refused = trio.run(send_until_refused, daemon.port, 1000, acks)
    assert refused.code == ResponseCode.SYSTEM_ERROR, refused
    failed = daemon.event("segment_creation_failed")
    assert "Input/output error" in str(failed["error"]), failed
    assert max(acks) < 2 * SEGMENT_SIZE, "a segment whose name is not durable was written"
    powercut.set_eio(False, dirs=False)
    daemon.event("segment_creation_recovered")
    trio.run(send_ok, daemon.port, 80, "after", acks)
    assert max(acks) >= 2 * SEGMENT_SIZE

    daemon.kill()
    powercut.cut()
    powercut.mount()
    daemon = Daemon(store_dir, *SYNC)
    brokers.append(daemon)
    check_acknowledged(read_records(store_dir), acks)
    assert daemon.stop() == 0
