"""Pulls while retention deletes the segments under them, on a running broker over loopback:
every answer is a record as it was sent, a step past what went, or PULL_OFFSET_MOVED to the
oldest message kept; never an error, never a record twice; a held pull still gets its message."""

from __future__ import annotations

import os
import pathlib
import time

import trio

from protocol.codes import ResponseCode
from rmq_client.producer import Message, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from store.message_store import DefaultMessageStore
from tests.conftest import make_config, start_broker
from tests.store.conftest import wait_until

TOPIC = "Pulled"
COUNT = 240
HOUR = time.localtime().tm_hour


def body_of(offset: int) -> bytes:
    return f"{offset:05d}".encode().ljust(900, b"~")


def age_all_but_last(store: DefaultMessageStore) -> None:
    files = store.mapped_file_queue.mapped_files[:-1]
    past = os.path.getmtime(files[0].file_name) - 100 * 3600
    for mapped_file in files:
        os.utime(mapped_file.file_name, (past, past))


async def test_pulls_while_their_segments_are_deleted(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    config = make_config(
        tmp_path / "store",
        mapped_file_size_commit_log=4096,
        flush_disk_type="SYNC_FLUSH",
        delete_when=str((HOUR + 12) % 24),
        clean_resource_interval=3_600_000,
        delete_physic_files_interval=3,
        mapped_file_size_consume_queue=20 * 16,
    )
    broker = await start_broker(nursery, config)
    store = broker.server.broker.store
    assert isinstance(store, DefaultMessageStore)
    async with open_producer("127.0.0.1", broker.port) as producer:
        for offset in range(COUNT):
            result = await producer.send(Message(TOPIC, body_of(offset), queue_id=0))
            assert result.queue_offset == offset
        await producer.send(Message(TOPIC, b"queue-1", queue_id=1))
    consume = store.consume
    assert consume is not None
    await wait_until(lambda: consume.max_offset_in_queue(TOPIC, 0) == COUNT)
    age_all_but_last(store)
    store.clean_commit_log.hour = lambda: HOUR + 100  # no delete hour: only manual rounds
    deleting = trio.Event()
    received: list[int] = []
    moves: list[tuple[int, int]] = []

    async def delete_everything_old() -> None:
        store.execute_delete_files_manually()
        deleting.set()
        cleaner = store.clean_consume_queue
        assert cleaner is not None
        while store.segment_count > 1:
            await store.clean_commit_log.run_round()
            await cleaner.run_round()

    async def pull_through(offset: int) -> None:
        async with open_pull_consumer("127.0.0.1", broker.port, "retention_pull") as consumer:
            await consumer.subscribe(TOPIC)
            await deleting.wait()
            while offset < COUNT:
                result = await consumer.pull(TOPIC, 0, offset, max_nums=3)
                if result.code == ResponseCode.PULL_OFFSET_MOVED:
                    assert result.next_begin_offset > offset
                    moves.append((offset, result.next_begin_offset))
                elif result.found:
                    for record in result.records:
                        assert record.queue_offset >= offset
                        assert record.body == body_of(record.queue_offset)
                        received.append(record.queue_offset)
                        offset = record.queue_offset + 1
                else:
                    assert result.code == ResponseCode.PULL_RETRY_IMMEDIATELY, result.code
                offset = max(offset, result.next_begin_offset)

    async def held_pull(answer: list[bytes]) -> None:
        async with open_pull_consumer("127.0.0.1", broker.port, "retention_held") as consumer:
            await consumer.subscribe(TOPIC)
            result = await consumer.pull(TOPIC, 1, 1, suspend_ms=20_000)
            answer.extend(r.body or b"" for r in result.records)

    held: list[bytes] = []
    with trio.fail_after(60):
        async with trio.open_nursery() as outer:
            outer.start_soon(held_pull, held)  # waits on queue 1 through all the deletions
            async with trio.open_nursery() as inner:
                inner.start_soon(pull_through, 0)
                inner.start_soon(delete_everything_old)
            assert store.segment_count == 1
            async with open_producer("127.0.0.1", broker.port) as producer:
                await producer.send(Message(TOPIC, b"after-the-deletions", queue_id=1))
    assert received == sorted(set(received)), "a record was received twice or out of order"
    assert received[-1] == COUNT - 1
    first_kept = consume.min_offset_in_queue(TOPIC, 0)
    assert set(range(first_kept, COUNT)) <= set(received)  # everything still stored arrived
    assert b"after-the-deletions" in held
    print(f"pulled={len(received)} of {COUNT} moves={moves} first_kept={first_kept}")
    await broker.stop()
