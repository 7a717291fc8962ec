"""`look_message_by_offset`: a record is read only from an offset that starts one.

Offsets into a body crafted to look like headers (with a huge size, with the record's own
position in PHYSICALOFFSET, running past the readable end), misaligned offsets, offsets outside
the log and in a segment being deleted all give None without copying the size they claim; real
records give their fields, and one larger than `LOOP_READ_MAX_BYTES` is read in a worker thread.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any

import pytest
import trio

import store.lookup
from store.config import FlushDiskType, MessageStoreConfig
from store.consume_service import ConsumeService
from store.layout import HEADER_V4, MESSAGE_MAGIC_CODE, PHYSICALOFFSET_POS, RECORD_OVERHEAD_BYTES
from store.message_store import DefaultMessageStore
from store.status import PutMessageStatus

from .conftest import make_msg, wait_until

MAX_MESSAGE = 128 * 1024


@pytest.fixture
def big_config(config: MessageStoreConfig) -> MessageStoreConfig:
    return dataclasses.replace(
        config,
        mapped_file_size_commit_log=4 << 20,
        max_message_size=MAX_MESSAGE,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
    )


def fake_header(size: int, physical_offset: int) -> bytes:
    head = bytearray(PHYSICALOFFSET_POS + 8)
    struct.pack_into(">ii", head, 0, size, MESSAGE_MAGIC_CODE)
    struct.pack_into(">q", head, PHYSICALOFFSET_POS, physical_offset)
    return bytes(head)


async def put(store: DefaultMessageStore, body: bytes) -> tuple[int, int]:
    """(offset, size) of the stored record."""
    result = await store.put_message(make_msg(body=body))
    assert result.status is PutMessageStatus.PUT_OK and result.append_result is not None
    return result.append_result.wrote_offset, result.append_result.wrote_bytes


def consume_of(store: DefaultMessageStore) -> ConsumeService:
    assert store.consume is not None
    return store.consume


@pytest.fixture
def thread_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sizes read through `trio.to_thread.run_sync` by the lookup."""
    sizes: list[int] = []
    real = trio.to_thread.run_sync

    async def counting(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if fn is store.lookup.pread_exact:
            sizes.append(args[1])  # (fd, size, pos)
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", counting)
    return sizes


async def test_real_records_are_read_and_large_ones_off_the_event_loop(
    big_config: MessageStoreConfig, thread_reads: list[int]
) -> None:
    async with DefaultMessageStore.open(big_config) as message_store:
        small_at, _ = await put(message_store, b"small")
        large_body = bytes(range(256)) * 400  # 100 KiB: above the loop's share
        large_at, large_size = await put(message_store, large_body)
        consume = consume_of(message_store)
        small = await consume.look_message_by_offset(small_at, MAX_MESSAGE)
        large = await consume.look_message_by_offset(large_at, MAX_MESSAGE)
    assert small is not None and small.body == b"small" and small.physical_offset == small_at
    assert large is not None and large.body == large_body and large.total_size == large_size
    assert thread_reads == [large_size]


async def test_offsets_that_start_no_record_give_none_without_reading_what_they_claim(
    big_config: MessageStoreConfig, thread_reads: list[int]
) -> None:
    async with DefaultMessageStore.open(big_config) as message_store:
        probe_at, probe_size = await put(message_store, bytes(256))
        crafted_at = probe_at + probe_size
        body_at = crafted_at + HEADER_V4.size
        too_big = MAX_MESSAGE + RECORD_OVERHEAD_BYTES + 1
        body = (
            fake_header(3 << 20, 0)  # a large size, no self offset
            + bytes(28)
            + fake_header(too_big, body_at + 64)  # its own offset, but too large a record
            + bytes(28)
            + fake_header(1 << 20, body_at + 128)  # its own offset, past the readable end
        ).ljust(256, b"\0")
        assert await put(message_store, body) == (crafted_at, probe_size)
        for _ in range(2):  # readable bytes after the crafted ones
            await put(message_store, bytes(MAX_MESSAGE))
        consume = consume_of(message_store)
        await wait_until(lambda: consume.dispatched_offset > crafted_at + too_big)
        end = consume.dispatched_offset
        bad = [body_at, body_at + 64, body_at + 128, crafted_at + 1, -1, end, end + 4096]
        found = [await consume.look_message_by_offset(o, MAX_MESSAGE) for o in bad]
        assert await consume.look_message_by_offset(crafted_at, MAX_MESSAGE) is not None
    assert found == [None] * len(bad)
    assert thread_reads == []


async def test_a_segment_being_deleted_is_not_read(big_config: MessageStoreConfig) -> None:
    async with DefaultMessageStore.open(big_config) as message_store:
        at, _ = await put(message_store, bytes(100_000))
        consume = consume_of(message_store)
        segment = message_store.mapped_file_queue.find_mapped_file_by_offset(at)
        assert segment is not None
        segment.destroy_started_ms = 1  # retention has begun deleting it
        try:
            assert await consume.look_message_by_offset(at, MAX_MESSAGE) is None
        finally:
            segment.destroy_started_ms = None
        assert segment.ref_count == 0
