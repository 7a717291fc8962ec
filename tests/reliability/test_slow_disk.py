"""A slow disk, in-process: the broker (`broker.server.serve`, real sockets) over a store whose
fdatasync or writer is held up by the test.

A slow flush answers SYNC_FLUSH producers FLUSH_DISK_TIMEOUT once `sync_flush_timeout_ms` has
passed (the message is stored: a "send OK" code); a writer stuck inside a group makes new sends
answer busy at once (SYSTEM_BUSY `[REJECTREQUEST]`, as upstream's `rejectRequest`) after
`os_page_cache_busy_timeout_ms`; a send already queued is answered OS_PAGE_CACHE_BUSY
(`[PC_SYNCHRONIZED]`). Either way every send is answered, never left hanging: sends
already queued behind the stuck writer included.
"""

from __future__ import annotations

import pathlib
import time

import pytest
import trio

from broker.client import Message, SendError, SendStatus, open_producer
from protocol.codes import ResponseCode
from store.commit_log import Appended, CommitLog
from store.encode import EncodedBatch
from store.mapped_file import MappedFile
from store.status import PutMessageStatus
from tests.conftest import make_config, start_broker

SYNC_FLUSH_TIMEOUT_MS = 300
BUSY_TIMEOUT_MS = 200
HOLD_S = 1.5
#: what a client waits before giving up (the stub's default is 3 s)
CLIENT_TIMEOUT_S = 3.0
BUSY_CODES = {ResponseCode.SYSTEM_BUSY, ResponseCode.SYSTEM_ERROR}


async def test_slow_flush_answers_flush_disk_timeout_within_the_configured_timeout(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_sync = MappedFile.sync
    slow = {"on": False}

    def sync(self: MappedFile) -> None:
        if slow["on"]:
            time.sleep(1.0)  # a sick disk: every fdatasync takes a second
        real_sync(self)

    monkeypatch.setattr(MappedFile, "sync", sync)
    config = make_config(
        tmp_path / "store",
        flush_disk_type="SYNC_FLUSH",
        sync_flush_timeout_ms=SYNC_FLUSH_TIMEOUT_MS,
    )
    async with trio.open_nursery() as nursery:
        broker = await start_broker(nursery, config)
        async with open_producer("127.0.0.1", broker.port) as client:
            assert (await client.send(Message("Slow", b"fast"))).status is SendStatus.SEND_OK
            slow["on"] = True
            started = trio.current_time()
            with trio.fail_after(CLIENT_TIMEOUT_S):
                result = await client.send(Message("Slow", b"slow"))
            elapsed = trio.current_time() - started
            assert result.status is SendStatus.FLUSH_DISK_TIMEOUT
            assert SYNC_FLUSH_TIMEOUT_MS / 1000 <= elapsed < SYNC_FLUSH_TIMEOUT_MS / 1000 + 0.5
            slow["on"] = False
        await broker.stop()


async def test_stuck_writer_answers_busy_and_never_hangs(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_put = CommitLog.put
    hold = {"on": False}

    async def put(self: CommitLog, batch: EncodedBatch, now_ms: int) -> Appended | PutMessageStatus:
        if hold["on"] and b"hold" in batch.data:
            await trio.sleep(HOLD_S)  # e.g. a segment creation stuck on the disk
        return await real_put(self, batch, now_ms)

    monkeypatch.setattr(CommitLog, "put", put)
    config = make_config(
        tmp_path / "store",
        flush_disk_type="SYNC_FLUSH",
        os_page_cache_busy_timeout_ms=BUSY_TIMEOUT_MS,
    )
    answers: dict[str, tuple[str, float]] = {}

    async def send(client_body: bytes, label: str) -> None:
        async with open_producer("127.0.0.1", broker.port, timeout_s=10) as client:
            started = trio.current_time()
            try:
                result = await client.send(Message("Stuck", client_body))
                outcome = result.status.name
            except SendError as refused:
                assert refused.code in BUSY_CODES and "busy" in (refused.remark or "").lower()
                outcome = f"busy {refused.code} {(refused.remark or '').split(']')[0]}]"
            answers[label] = (outcome, trio.current_time() - started)

    async with trio.open_nursery() as nursery:
        broker = await start_broker(nursery, config)
        hold["on"] = True
        async with trio.open_nursery() as senders:
            senders.start_soon(send, b"hold", "holder")
            await trio.sleep(0.05)
            senders.start_soon(send, b"queued", "queued")  # behind the stuck writer
            await trio.sleep(BUSY_TIMEOUT_MS / 1000 + 0.1)
            senders.start_soon(send, b"late", "late")  # the writer is now known stuck
        hold["on"] = False
        await broker.stop()
    assert answers["holder"][0] == "SEND_OK"
    # Turned away before any work, as upstream's rejectRequest; the queued one was taken out of
    # the writer's queue by the store.
    assert answers["late"][0] == "busy 2 [REJECTREQUEST]" and answers["late"][1] < 0.5, answers
    assert answers["queued"][0] == "busy 1 [PC_SYNCHRONIZED]", answers
    # A send that waits behind a stuck writer must be answered within the busy timeout (as the
    # late one is), not only when the writer comes back: a client gives up after its timeout.
    assert answers["queued"][1] < BUSY_TIMEOUT_MS / 1000 + 0.5, answers
