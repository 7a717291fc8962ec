"""Appends through the store: END_OF_FILE at the exact boundaries, rolls, batches, queue offsets."""

from __future__ import annotations

import dataclasses
import os
import struct

import pytest
import trio

from store.config import MessageStoreConfig
from store.layout import BLANK_MAGIC_CODE
from store.message import TRANSACTION_PREPARED_TYPE
from store.message_store import DefaultMessageStore
from store.reader import CommitLogReader
from store.status import PutMessageStatus
from tests.store.conftest import SEGMENT, body_for_record_size, make_msg


def _segment_bytes(config: MessageStoreConfig, base: int) -> bytes:
    with open(os.path.join(config.store_path_commit_log, f"{base:020d}"), "rb") as handle:
        return handle.read()


@pytest.mark.parametrize(("slack", "blank_first"), [(0, False), (-1, False), (1, True)])
async def test_end_of_file_boundary(
    config: MessageStoreConfig, slack: int, blank_first: bool
) -> None:
    """A record of msgLen fits iff msgLen + 8 <= remaining space."""
    filler = 1000
    async with DefaultMessageStore.open(config) as store:
        result = await store.put_message(
            make_msg(body_for_record_size(filler, properties=""), properties="")
        )
        assert result.status is PutMessageStatus.PUT_OK
        remaining = SEGMENT - filler
        size = remaining - 8 + slack
        result = await store.put_message(
            make_msg(body_for_record_size(size, properties=""), properties="")
        )
        assert result.status is PutMessageStatus.PUT_OK
        assert result.append_result is not None
        if blank_first:
            assert result.append_result.wrote_offset == SEGMENT
            data = _segment_bytes(config, 0)
            assert struct.unpack_from(">ii", data, filler) == (remaining, BLANK_MAGIC_CODE)
        else:
            assert result.append_result.wrote_offset == filler
            assert result.append_result.wrote_bytes == size
            # The next record never fits the <= 8 bytes left: a BLANK of exactly what remains.
            left = remaining - size
            result = await store.put_message(make_msg(b"z"))
            assert result.append_result is not None and result.append_result.wrote_offset == SEGMENT
            data = _segment_bytes(config, 0)
            assert struct.unpack_from(">ii", data, filler + size) == (left, BLANK_MAGIC_CODE)


async def test_roll_across_many_segments(config: MessageStoreConfig) -> None:
    async with DefaultMessageStore.open(config) as store:
        offsets = []
        for i in range(200):
            result = await store.put_message(make_msg(b"m" * (50 + i % 300), queue_id=i % 4))
            assert result.status is PutMessageStatus.PUT_OK and result.append_result is not None
            offsets.append(result.append_result.wrote_offset)
        assert store.segment_count > 10
        assert store.topic_queue_table == {f"T1-{q}": 50 for q in range(4)}
    with CommitLogReader(config.store_path_root_dir) as reader:
        records = list(reader.iter_records(0))
    assert [r.physical_offset for r in records] == offsets
    for rec in records:  # a record never spans two segments
        assert (
            rec.physical_offset // SEGMENT == (rec.physical_offset + rec.total_size - 1) // SEGMENT
        )
    assert [r.queue_offset for r in records if r.queue_id == 1] == list(range(50))


async def test_batch_never_spans_segments(config: MessageStoreConfig) -> None:
    async with DefaultMessageStore.open(config) as store:
        await store.put_message(make_msg(body_for_record_size(3000)))
        batch = [make_msg(b"x" * 300, queue_id=2) for _ in range(3)]  # about 1.3 KiB: does not fit
        result = await store.put_messages(batch)
        assert result.status is PutMessageStatus.PUT_OK and result.append_result is not None
        appended = result.append_result
        assert appended.wrote_offset == SEGMENT and appended.msg_num == 3
        assert appended.logics_offset == 0 and len(appended.msg_ids) == 3
        result = await store.put_messages(batch)
        assert result.append_result is not None and result.append_result.logics_offset == 3
    with CommitLogReader(config.store_path_root_dir) as reader:
        records = [r for r in reader.iter_records(0) if r.queue_id == 2]
    assert [r.queue_offset for r in records] == list(range(6))
    assert records[1].physical_offset == records[0].physical_offset + records[0].total_size
    assert len({r.store_timestamp for r in records[:3]}) == 1


async def test_prepared_messages_do_not_take_queue_offsets(config: MessageStoreConfig) -> None:
    async with DefaultMessageStore.open(config) as store:
        await store.put_message(make_msg())
        result = await store.put_message(make_msg(sys_flag=TRANSACTION_PREPARED_TYPE))
        assert result.append_result is not None and result.append_result.logics_offset == 0
        result = await store.put_message(make_msg())
        assert result.append_result is not None and result.append_result.logics_offset == 1
        assert store.topic_queue_table["T1-0"] == 2


async def test_concurrent_producers_single_writer(config: MessageStoreConfig) -> None:
    config = dataclasses.replace(config, mapped_file_size_commit_log=64 * 1024)
    producers, per_producer = 16, 40
    results: dict[int, list[tuple[int, int, int]]] = {}

    async def produce(producer: int) -> None:
        got = results.setdefault(producer, [])
        for i in range(per_producer):
            msg = make_msg(f"{producer}:{i}".encode(), queue_id=producer % 3)
            result = await store.put_message(msg)
            assert result.status is PutMessageStatus.PUT_OK and result.append_result is not None
            got.append((i, result.append_result.wrote_offset, result.append_result.logics_offset))

    with trio.fail_after(20):
        async with DefaultMessageStore.open(config) as store, trio.open_nursery() as nursery:
            for producer in range(producers):
                nursery.start_soon(produce, producer)
    all_offsets = [offset for got in results.values() for _, offset, _ in got]
    assert len(set(all_offsets)) == producers * per_producer
    for got in results.values():  # order kept per producer
        assert [o for _, o, _ in got] == sorted(o for _, o, _ in got)
    with CommitLogReader(config.store_path_root_dir) as reader:
        records = list(reader.iter_records(0))
    for queue_id in range(3):
        offsets = [r.queue_offset for r in records if r.queue_id == queue_id]
        assert offsets == list(range(len(offsets)))
    assert sorted(r.body for r in records if r.body) == sorted(
        f"{p}:{i}".encode() for p in range(producers) for i in range(per_producer)
    )
