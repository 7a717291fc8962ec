"""The message index on a real store: built behind dispatch, found after a reopen, cut to the
commit log and the checkpoint at a restart, and gone with the segments it points into."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest
from structlog.testing import capture_logs

from store.config import FlushDiskType, MessageStoreConfig
from store.consume_service import ConsumeService, query_message, view_message
from store.decode import decode_record
from store.index.index_file import IndexFile
from store.index.service import CHECKPOINT_FILE, INDEX_DIR, IndexService
from store.message import TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE
from store.message_store import DefaultMessageStore
from store.status import PutMessageStatus
from tests.store.conftest import body_for_record_size, make_msg, wait_until

FAR = 1 << 62


@pytest.fixture
def indexed(config: MessageStoreConfig) -> MessageStoreConfig:
    """Small index files (8 slots, 6 items: a roll every 5 keys), SYNC_FLUSH."""
    return dataclasses.replace(
        config,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        max_hash_slot_num=8,
        max_index_num=6,
        clean_resource_interval=3_600_000,
        delete_when="4",
        delete_physic_files_interval=0,
        delete_consume_queue_files_interval=0,
    )


def props(keys: str = "", uniq: str = "") -> str:
    pairs = ["TAGS\x01TagA"]
    if keys:
        pairs.append(f"KEYS\x01{keys}")
    if uniq:
        pairs.append(f"UNIQ_KEY\x01{uniq}")
    return "\x02".join(pairs)


async def put(
    store: DefaultMessageStore, keys: str = "", uniq: str = "", topic: str = "T1", **kw: Any
) -> int:
    result = await store.put_message(make_msg(topic=topic, properties=props(keys, uniq), **kw))
    assert result.status is PutMessageStatus.PUT_OK
    assert result.append_result is not None
    return result.append_result.wrote_offset


async def indexed_up(store: DefaultMessageStore) -> ConsumeService:
    consume = store.consume
    assert consume is not None and consume.index is not None
    index = consume.index
    await wait_until(lambda: consume.dispatched_offset >= store.max_offset)
    await wait_until(lambda: index.indexed_offset >= store.max_offset)
    return consume


async def offsets_of(
    store: DefaultMessageStore, key: str, topic: str = "T1", max_num: int = 32
) -> list[int]:
    consume = await indexed_up(store)
    result = await query_message(
        consume, topic=topic, key=key, max_num=max_num, begin=0, end=FAR, max_message_size=4096
    )
    return [decode_record(data, 0, verify_crc=False).physical_offset for data in result.messages]


async def test_keys_and_unique_keys_are_found_before_and_after_a_reopen(
    indexed: MessageStoreConfig,
) -> None:
    async with DefaultMessageStore.open(indexed) as store:
        first = await put(store, keys="order-1 customer-7", uniq="U1")
        await put(store, keys="order-2")
        second = await put(store, keys="customer-7", uniq="U3")
        await put(store)  # no key: nothing indexed
        assert await offsets_of(store, "order-1") == [first]
        assert await offsets_of(store, "customer-7") == [first, second]
        assert await offsets_of(store, "U3") == [second]
        assert await offsets_of(store, "order-1", topic="T2") == []
    async with DefaultMessageStore.open(indexed) as store:
        assert await offsets_of(store, "customer-7") == [first, second]
        assert await offsets_of(store, "U1") == [first]
        later = await put(store, keys="customer-7")
        assert await offsets_of(store, "customer-7") == [first, second, later]
    names = sorted(os.listdir(os.path.join(indexed.store_path_root_dir, INDEX_DIR)))
    assert len(names) >= 2 and all(len(n) == 17 and n.isdigit() for n in names)


async def test_many_messages_of_one_key_respect_max_num_across_files(
    indexed: MessageStoreConfig,
) -> None:
    async with DefaultMessageStore.open(indexed) as store:
        offsets = [await put(store, keys="same") for _ in range(23)]
        assert await offsets_of(store, "same", max_num=64) == offsets
        assert await offsets_of(store, "same", max_num=7) == offsets[-7:]  # newest first
        consume = await indexed_up(store)
        assert consume.index is not None and len(consume.index.files) >= 4
        result = await query_message(
            consume, topic="T1", key="same", max_num=1, begin=0, end=FAR, max_message_size=4096
        )
        assert result.index_last_update_phyoffset == offsets[-1]
        assert result.index_last_update_timestamp > 0


async def test_colliding_keys_do_not_answer_for_each_other(indexed: MessageStoreConfig) -> None:
    async with DefaultMessageStore.open(indexed) as store:
        aa = await put(store, keys="Aa")
        bb = await put(store, keys="BB")
        assert await offsets_of(store, "Aa") == [aa]
        assert await offsets_of(store, "BB") == [bb]


async def test_a_rollback_record_is_not_indexed_and_a_prepared_one_is(
    indexed: MessageStoreConfig,
) -> None:
    async with DefaultMessageStore.open(indexed) as store:
        prepared = await put(store, keys="p", sys_flag=TRANSACTION_PREPARED_TYPE)
        await put(store, keys="r", sys_flag=TRANSACTION_ROLLBACK_TYPE)
        assert await offsets_of(store, "p") == [prepared]
        assert await offsets_of(store, "r") == []


async def test_view_by_offset_checks_the_offset_first(indexed: MessageStoreConfig) -> None:
    async with DefaultMessageStore.open(indexed) as store:
        first = await put(store, keys="a")
        second = await put(store, keys="b")
        consume = await indexed_up(store)
        data = await view_message(consume, second, 4096)
        assert data is not None and decode_record(data, 0).physical_offset == second
        assert await view_message(consume, first + 4, 4096) is None  # not a record start
        assert await view_message(consume, store.max_offset, 4096) is None
        assert await view_message(consume, -1, 4096) is None


async def test_the_index_is_cut_to_the_commit_log_and_to_its_checkpoint(
    indexed: MessageStoreConfig,
) -> None:
    async with DefaultMessageStore.open(indexed) as store:
        offsets = [await put(store, keys="k") for _ in range(12)]
        await indexed_up(store)
    check_cuts(indexed.store_path_root_dir, offsets)


def check_cuts(root: str, offsets: list[int]) -> None:
    # the commit log recovered less than the index holds: items past its end go
    index = IndexService.open(root, 8, 6, log_min=0, log_max=offsets[7], abnormal=True)
    try:
        found = index.query_offsets("T1", "k", 64, 0, FAR).offsets
        assert sorted(found) == offsets[:7]
        assert index.indexed_offset == offsets[7]
    finally:
        index.close()
    # a file newer than the one the checkpoint names (written after the last save) is dropped
    index_dir = os.path.join(root, INDEX_DIR)
    newest = max(os.listdir(index_dir))
    with open(os.path.join(root, CHECKPOINT_FILE), encoding="ascii") as handle:
        offset, name, _count = handle.read().split()
    assert (int(offset), name) == (offsets[7], newest)
    stray = os.path.join(index_dir, "99991231235959999")
    with open(os.path.join(index_dir, newest), "rb") as src, open(stray, "wb") as dst:
        dst.write(src.read())
    index = IndexService.open(root, 8, 6, log_min=0, log_max=offsets[-1] + 1, abnormal=True)
    index.close()
    assert not os.path.exists(stray)


async def test_without_a_checkpoint_the_index_is_rebuilt_from_the_log(
    indexed: MessageStoreConfig,
) -> None:
    async with DefaultMessageStore.open(indexed) as store:
        offsets = [await put(store, keys=f"k{n % 2}") for n in range(6)]
        await indexed_up(store)
    os.unlink(os.path.join(indexed.store_path_root_dir, CHECKPOINT_FILE))
    async with DefaultMessageStore.open(indexed) as store:
        assert await offsets_of(store, "k1") == offsets[1::2]


async def test_a_key_whose_segment_was_deleted_is_no_longer_returned(
    indexed: MessageStoreConfig,
) -> None:
    body = body_for_record_size(1024, properties=props("old"))
    async with DefaultMessageStore.open(indexed) as store:
        old = [await put(store, keys="old", body=body) for _ in range(9)]
        new = await put(store, keys="new")
        consume = await indexed_up(store)
        assert consume.index is not None
        files_before = len(consume.index.files)
        assert await offsets_of(store, "old", max_num=64) == old
        # the first two segments are expired; it is the delete hour
        for mapped_file in store.mapped_file_queue.mapped_files[:2]:
            os.utime(mapped_file.file_name, (0, 0))
        store.clean_commit_log.hour = lambda: 4
        assert await store.clean_commit_log.run_round() == 2
        assert store.clean_consume_queue is not None
        await store.clean_consume_queue.run_round()
        kept = [offset for offset in old if offset >= store.min_offset]
        assert kept and len(kept) < len(old)
        assert await offsets_of(store, "old", max_num=64) == kept
        assert await offsets_of(store, "new") == [new]
        assert len(consume.index.files) < files_before
        assert all(f.end_offset >= store.min_offset for f in consume.index.files)


async def test_files_of_other_limits_are_rebuilt_under_the_new_ones(
    indexed: MessageStoreConfig,
) -> None:
    async with DefaultMessageStore.open(indexed) as store:
        offsets = [await put(store, keys="k") for _ in range(8)]
        await indexed_up(store)
    wider = dataclasses.replace(indexed, max_hash_slot_num=32, max_index_num=40)
    async with DefaultMessageStore.open(wider) as store:
        assert await offsets_of(store, "k") == offsets
        consume = await indexed_up(store)
        assert consume.index is not None and len(consume.index.files) == 1


async def test_items_written_after_the_last_save_are_forgotten_at_open(
    indexed: MessageStoreConfig,
) -> None:
    async with DefaultMessageStore.open(indexed) as store:
        offsets = [await put(store, keys="k") for _ in range(3)]
        await indexed_up(store)
    forget_ghost(indexed.store_path_root_dir, offsets)


def forget_ghost(root: str, offsets: list[int]) -> None:
    index_dir = os.path.join(root, INDEX_DIR)
    last = IndexFile(os.path.join(index_dir, max(os.listdir(index_dir))), 8, 6)
    assert last.put_key("T1#ghost", offsets[-1], 0)  # as a crash after the last save leaves it
    last.flush()
    last.close()
    index = IndexService.open(root, 8, 6, log_min=0, log_max=1 << 40, abnormal=False)
    try:
        assert index.query_offsets("T1", "ghost", 64, 0, FAR).offsets == []
        assert sorted(index.query_offsets("T1", "k", 64, 0, FAR).offsets) == offsets
    finally:
        index.close()


async def test_a_fault_in_the_batched_path_leaves_the_store_up_and_the_keys_found(
    indexed: MessageStoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug of ours in the array path (here: an AttributeError, as a half-imported numpy
    raised) is one `index_build_fault` event; the record-by-record path takes over."""
    import store.index.batch as batch_module
    import store.index.service as service_module

    def broken(*_args: object) -> object:
        raise AttributeError("module 'numpy' has no attribute 'matrix'")

    monkeypatch.setattr(batch_module, "run_keys", broken)
    monkeypatch.setattr(service_module, "MIN_VECTORISED_RUN", 1)  # one-message runs take it
    with capture_logs() as logs:
        async with DefaultMessageStore.open(indexed) as store:
            first = await put(store, keys="order-1")
            second = await put(store, keys="order-1")
            assert await offsets_of(store, "order-1") == [first, second]
            assert (await put(store)) > second  # the store still takes messages
    faults = [e for e in logs if e["event"] == "index_build_fault"]
    assert len(faults) == 1 and faults[0]["log_level"] == "error", logs
