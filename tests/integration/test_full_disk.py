"""A store on a small tmpfs: when space runs out the broker refuses sends with a clear code and
stays up, acknowledges nothing it did not store, and resumes once space is freed."""

from __future__ import annotations

import os
import pathlib
import subprocess
from collections.abc import Iterator

import pytest
import trio

from protocol.codes import ResponseCode
from protocol.msgid import decode_offset_msg_id
from rmq_client.producer import Message, SendError, SendStatus, open_producer
from store.reader import CommitLogReader
from tests.daemon import Daemon

SEGMENT = 1 << 20
FS_SIZE = 4 << 20
FILLER = 1536 << 10
REFUSED = {ResponseCode.SYSTEM_ERROR, ResponseCode.SERVICE_NOT_AVAILABLE}


@pytest.fixture
def small_fs(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    mount = tmp_path / "fs"
    mount.mkdir()
    options = f"size={FS_SIZE}"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


async def fill_until_refused(port: int, acked: dict[int, bytes]) -> SendError:
    async with open_producer("127.0.0.1", port, timeout_s=10) as client:
        for seq in range(100_000):
            body = b"%06d" % seq + b"x" * 1018
            try:
                result = await client.send(Message("FullDisk", body))
            except SendError as refused:
                return refused
            assert result.status is SendStatus.SEND_OK
            acked[decode_offset_msg_id(result.offset_msg_id)[2]] = body
    raise AssertionError("the file system never filled up")


async def send_until_accepted(port: int, acked: dict[int, bytes]) -> int:
    attempts = 0
    async with open_producer("127.0.0.1", port, timeout_s=10) as client:
        with trio.fail_after(30):
            while True:
                attempts += 1
                try:
                    result = await client.send(Message("FullDisk", b"after-space-freed"))
                except SendError as refused:
                    assert refused.code in REFUSED
                    await trio.sleep(0.2)
                    continue
                acked[decode_offset_msg_id(result.offset_msg_id)[2]] = b"after-space-freed"
                return attempts


def test_full_disk_refuses_then_resumes_without_losing_acknowledged(
    small_fs: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    filler = small_fs / "filler"
    filler.write_bytes(b"\1" * FILLER)
    monkeypatch.setenv("RMQ_MAPPED_FILE_SIZE_COMMIT_LOG", str(SEGMENT))
    # the refusals themselves are under test: no forced cleanup makes room
    monkeypatch.setenv("RMQ_CLEAN_FILE_FORCIBLY_ENABLE", "false")
    daemon = Daemon(small_fs / "store", "--flush-disk-type", "SYNC_FLUSH")
    acked: dict[int, bytes] = {}
    try:
        refused = trio.run(fill_until_refused, daemon.port, acked)
        assert refused.code in REFUSED and refused.remark
        assert daemon.process.poll() is None, "the broker died when the disk filled"
        assert len(acked) > 100
        os.unlink(filler)
        trio.run(send_until_accepted, daemon.port, acked)
    finally:
        daemon.process.terminate()
        exit_code = daemon.finish()
    assert exit_code == 0
    with CommitLogReader(str(small_fs / "store")) as reader:
        stored = {r.physical_offset: r.body for r in reader.iter_records(reader.min_offset)}
    for offset, body in acked.items():
        assert stored.get(offset) == body, f"acknowledged message at {offset} lost"
