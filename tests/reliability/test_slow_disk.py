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
import threading

import pytest
import trio

from protocol.codes import ResponseCode
from rmq_client.producer import Message, SendError, SendStatus, open_producer
from store.commit_log import Appended, CommitLog
from store.encode import EncodedBatch
from store.mapped_file import MappedFile
from store.status import PutMessageStatus
from tests.conftest import make_config, start_broker

SYNC_FLUSH_TIMEOUT_MS = 300
BUSY_TIMEOUT_MS = 200
#: a generous bound on every wait: a send not answered by then hangs
DEADLINE_S = 20.0
BUSY_CODES = {ResponseCode.SYSTEM_BUSY, ResponseCode.SYSTEM_ERROR}


async def test_slow_flush_answers_flush_disk_timeout_within_the_configured_timeout(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_sync = MappedFile.sync
    slow = {"on": False}
    entered, released = threading.Event(), threading.Event()

    def sync(self: MappedFile) -> None:
        if slow["on"]:
            entered.set()
            released.wait(DEADLINE_S)  # a sick disk: the fdatasync does not return
        real_sync(self)

    monkeypatch.setattr(MappedFile, "sync", sync)
    config = make_config(
        tmp_path / "store",
        flush_disk_type="SYNC_FLUSH",
        sync_flush_timeout_ms=SYNC_FLUSH_TIMEOUT_MS,
    )
    async with trio.open_nursery() as nursery:
        broker = await start_broker(nursery, config)
        # the client gives up long before the stuck fdatasync would return by itself
        async with open_producer("127.0.0.1", broker.port, timeout_s=DEADLINE_S / 2) as client:
            assert (await client.send(Message("Slow", b"fast"))).status is SendStatus.SEND_OK
            slow["on"] = True
            started = trio.current_time()
            result = await client.send(Message("Slow", b"slow"))
            # answered by the timeout while the flush is still stuck, not by its end
            assert entered.is_set() and not released.is_set()
            assert trio.current_time() - started >= SYNC_FLUSH_TIMEOUT_MS / 1000  # not before
            assert result.status is SendStatus.FLUSH_DISK_TIMEOUT
            slow["on"] = False
            released.set()
        await broker.stop()


async def test_stuck_writer_answers_busy_and_never_hangs(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_put = CommitLog.put
    holding, released = trio.Event(), trio.Event()

    async def put(self: CommitLog, batch: EncodedBatch, now_ms: int) -> Appended | PutMessageStatus:
        if b"hold" in batch.data:
            holding.set()
            await released.wait()  # e.g. a segment creation stuck on the disk
        return await real_put(self, batch, now_ms)

    real_try_put = CommitLog.try_put

    def try_put(self: CommitLog, batch: EncodedBatch, now_ms: int) -> Appended | None:
        # the held put takes the slow way, where a segment is created
        return None if b"hold" in batch.data else real_try_put(self, batch, now_ms)

    monkeypatch.setattr(CommitLog, "put", put)
    monkeypatch.setattr(CommitLog, "try_put", try_put)
    config = make_config(
        tmp_path / "store",
        flush_disk_type="SYNC_FLUSH",
        os_page_cache_busy_timeout_ms=BUSY_TIMEOUT_MS,
    )
    answers: dict[str, str] = {}
    answered = {"queued": trio.Event(), "late": trio.Event(), "holder": trio.Event()}

    async def send(client_body: bytes, label: str) -> None:
        async with open_producer("127.0.0.1", broker.port, timeout_s=DEADLINE_S) as client:
            try:
                result = await client.send(Message("Stuck", client_body))
                outcome = result.status.name
            except SendError as refused:
                assert refused.code in BUSY_CODES and "busy" in (refused.remark or "").lower()
                outcome = f"busy {refused.code} {(refused.remark or '').split(']')[0]}]"
            # answered while the writer was still stuck, or only once it came back
            answers[label] = outcome + ("" if released.is_set() else " (writer stuck)")
            answered[label].set()

    async with trio.open_nursery() as nursery:
        broker = await start_broker(nursery, config)
        with trio.fail_after(DEADLINE_S):
            async with trio.open_nursery() as senders:
                senders.start_soon(send, b"hold", "holder")
                await holding.wait()
                senders.start_soon(send, b"queued", "queued")  # behind the stuck writer
                await answered["queued"].wait()  # after the busy timeout: known stuck
                senders.start_soon(send, b"late", "late")
                await answered["late"].wait()
                released.set()
        await broker.stop()
    assert answers["holder"] == "SEND_OK"
    # Turned away before any work, as upstream's rejectRequest; the queued one was taken out of
    # the writer's queue by the store. A send that waits behind a stuck writer must be answered
    # while it is stuck (a client gives up after its timeout), not only when it comes back.
    assert answers["late"] == "busy 2 [REJECTREQUEST] (writer stuck)", answers
    assert answers["queued"] == "busy 1 [PC_SYNCHRONIZED] (writer stuck)", answers
