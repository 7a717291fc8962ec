"""Pulls of records too large to copy on the event loop, on a running broker over loopback.

A record over `LOOP_READ_MAX_BYTES` is read by `pread` in a worker thread: a batch ends before
it, the next pull returns it alone, exactly as sent, and the pull after that goes on with the
small ones; a TAG filter that does not match it steps past it; a segment deleted under it gives
an empty answer, never an error.
"""

from __future__ import annotations

import pathlib
import threading

import pytest
import trio

import store.lookup
from protocol.codes import ResponseCode
from rmq_client.producer import Message, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from store.lookup import LOOP_READ_MAX_BYTES
from store.message_store import DefaultMessageStore
from tests.conftest import make_config, start_broker
from tests.store.conftest import wait_until

TOPIC = "LargePulls"
LARGE = bytes(range(256)) * ((3 * LOOP_READ_MAX_BYTES) // 256)


@pytest.fixture
def pread_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of the thread each large read ran in."""
    names: list[str] = []
    real = store.lookup.pread_exact

    def spying(fd: int, size: int, pos: int) -> bytes | None:
        names.append(threading.current_thread().name)
        return real(fd, size, pos)

    monkeypatch.setattr(store.lookup, "pread_exact", spying)
    return names


async def test_a_large_record_is_pulled_alone_and_read_off_the_loop(
    nursery: trio.Nursery, tmp_path: pathlib.Path, pread_threads: list[str]
) -> None:
    broker = await start_broker(nursery, make_config(tmp_path / "store"))
    bodies = [b"small-0", LARGE, b"small-2", b"small-3"]
    async with open_producer("127.0.0.1", broker.port) as producer:
        for offset, body in enumerate(bodies):
            tags = "Aa" if body is LARGE else "small"
            result = await producer.send(Message(TOPIC, body, tags=tags, queue_id=0))
            assert result.queue_offset == offset
    async with open_pull_consumer("127.0.0.1", broker.port, "large_pulls") as consumer:
        await consumer.subscribe(TOPIC)
        first = await consumer.pull(TOPIC, 0, 0, max_nums=32)
        assert [r.body for r in first.records] == [b"small-0"]
        assert first.next_begin_offset == 1  # the batch ends before the large record
        assert pread_threads == []
        second = await consumer.pull(TOPIC, 0, 1, max_nums=32)
        assert second.found
        assert [(r.queue_offset, r.body) for r in second.records] == [(1, LARGE)]
        assert second.next_begin_offset == 2
        assert len(pread_threads) == 1
        assert pread_threads[0] != threading.main_thread().name
        third = await consumer.pull(TOPIC, 0, 2, max_nums=32)
        assert [r.body for r in third.records] == [b"small-2", b"small-3"]
        # "BB" has the tags code of "Aa" (Java's String.hashCode), so only the record's own
        # TAGS, after its body, tell them apart: read in the thread, not matched, stepped over.
        filtered = await consumer.pull(TOPIC, 0, 1, max_nums=32, expression="BB")
        assert filtered.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert filtered.next_begin_offset == 2
        assert len(pread_threads) == 2
        matched = await consumer.pull(TOPIC, 0, 1, max_nums=32, expression="Aa")
        assert [r.body for r in matched.records] == [LARGE]
    await broker.stop()


async def test_a_large_record_whose_segment_is_being_deleted_is_an_empty_answer(
    nursery: trio.Nursery, tmp_path: pathlib.Path, pread_threads: list[str]
) -> None:
    broker = await start_broker(nursery, make_config(tmp_path / "store"))
    store_ = broker.server.broker.store
    assert isinstance(store_, DefaultMessageStore)
    async with open_producer("127.0.0.1", broker.port) as producer:
        await producer.send(Message(TOPIC, LARGE, queue_id=0))
    consume = store_.consume
    assert consume is not None
    await wait_until(lambda: consume.max_offset_in_queue(TOPIC, 0) == 1)
    segment = store_.mapped_file_queue.mapped_files[0]
    segment.destroy_started_ms = 1  # retention has begun deleting it
    async with open_pull_consumer("127.0.0.1", broker.port, "large_pulls") as consumer:
        await consumer.subscribe(TOPIC)
        result = await consumer.pull(TOPIC, 0, 0, max_nums=32)
    assert result.records == []
    assert result.code == ResponseCode.PULL_NOT_FOUND, result.code  # OFFSET_FOUND_NULL
    assert result.next_begin_offset == 1
    assert pread_threads == []
    segment.destroy_started_ms = None
    await broker.stop()
