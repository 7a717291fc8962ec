"""The store's replication API on real mmap'ed files: a master's `read_from`, a slave's
`append_at` with its refusals, the slave's consume queues built from the copied bytes, and the
SYNC_MASTER wait (`GroupTransferService`) inside a real store."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import trio

from store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from store.message_store import DefaultMessageStore
from store.replica import ReplicaAppendError
from store.status import PutMessageStatus
from tests.store.conftest import make_msg, wait_until

SEGMENT = 4096


def configs(tmp_path: Path, **master: object) -> tuple[MessageStoreConfig, MessageStoreConfig]:
    base = MessageStoreConfig(
        store_path_root_dir=str(tmp_path / "master"),
        mapped_file_size_commit_log=SEGMENT,
        checkpoint_interval_ms=50,
    )
    slave = dataclasses.replace(
        base, store_path_root_dir=str(tmp_path / "slave"), broker_role=BrokerRole.SLAVE
    )
    return dataclasses.replace(base, **master), slave  # type: ignore[arg-type]


def segments(config: MessageStoreConfig) -> dict[str, bytes]:
    path = config.store_path_commit_log
    out = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as fh:
            out[name] = fh.read()
    return out


async def copy(master: DefaultMessageStore, slave: DefaultMessageStore, batch: int) -> None:
    """What the HA connection does: read from the slave's end, append there, until caught up."""
    while True:
        data = master.replica.read_from(slave.written_offset, batch)
        assert data is not None
        if not data:
            return
        await slave.replica.append_at(slave.written_offset, data)


@pytest.mark.parametrize("batch", [100, 4096])
async def test_slave_segments_equal_masters_and_its_queues_follow(
    tmp_path: Path, batch: int
) -> None:
    master_config, slave_config = configs(tmp_path)
    async with (
        DefaultMessageStore.open(master_config) as master,
        DefaultMessageStore.open(slave_config) as slave,
    ):
        for i in range(60):  # ~ 8 KiB of records: three segments with end-of-file blanks
            result = await master.put_message(make_msg(b"m%03d" % i * 10, queue_id=i % 2))
            assert result.status is PutMessageStatus.PUT_OK
        await copy(master, slave, batch)
        assert slave.written_offset == master.written_offset
        assert slave.replica.whole_end == master.written_offset
        consume = slave.consume
        assert consume is not None
        await wait_until(lambda: consume.max_offset_in_queue("T1", 1) == 30)
        assert consume.max_offset_in_queue("T1", 0) == 30
    assert segments(slave_config) == segments(master_config)
    assert len(segments(master_config)) >= 3


async def test_a_record_cut_in_two_is_not_dispatched_until_whole(tmp_path: Path) -> None:
    master_config, slave_config = configs(tmp_path)
    async with (
        DefaultMessageStore.open(master_config) as master,
        DefaultMessageStore.open(slave_config) as slave,
    ):
        result = await master.put_message(make_msg(b"x" * 200))
        assert result.append_result is not None
        size = result.append_result.wrote_bytes
        data = master.replica.read_from(0, 4096)
        assert data is not None and len(data) == size
        await slave.replica.append_at(0, data[:50])
        assert slave.replica.whole_end == 0
        await trio.sleep(0.3)  # the dispatcher had its rounds
        consume = slave.consume
        assert consume is not None
        assert consume.max_offset_in_queue("T1", 0) == 0
        await slave.replica.append_at(50, data[50:])
        assert slave.replica.whole_end == size
        await wait_until(lambda: consume.max_offset_in_queue("T1", 0) == 1)


async def test_appends_anywhere_but_the_end_are_refused(tmp_path: Path) -> None:
    _, slave_config = configs(tmp_path)
    async with DefaultMessageStore.open(slave_config) as slave:
        with pytest.raises(ReplicaAppendError, match="segment start"):
            await slave.replica.append_at(100, b"x")
        await slave.replica.append_at(SEGMENT * 3, b"abc")  # an empty slave starts anywhere
        assert slave.written_offset == SEGMENT * 3 + 3
        with pytest.raises(ReplicaAppendError, match="ends at 12291, not 12290"):
            await slave.replica.append_at(SEGMENT * 3 + 2, b"x")
        with pytest.raises(ReplicaAppendError, match="cross a segment's end"):
            await slave.replica.append_at(SEGMENT * 3 + 3, b"x" * SEGMENT)
        assert slave.written_offset == SEGMENT * 3 + 3  # nothing was written


async def test_read_from_bounds(tmp_path: Path) -> None:
    master_config, _ = configs(tmp_path)
    async with DefaultMessageStore.open(master_config) as master:
        assert master.replica.read_from(0, 100) == b""
        await master.put_message(make_msg())
        end = master.written_offset
        assert master.replica.read_from(end, 100) == b""
        assert master.replica.read_from(end + 1, 100) is None
        assert master.replica.read_from(0, 10) is not None
        assert len(master.replica.read_from(0, 10) or b"") == 10


async def test_sync_master_waits_for_a_slave(tmp_path: Path) -> None:
    master_config, _ = configs(
        tmp_path,
        broker_role=BrokerRole.SYNC_MASTER,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        sync_flush_timeout_ms=300,
    )
    async with DefaultMessageStore.open(master_config) as master:
        transfer = master.transfer
        assert transfer is not None
        no_slave = await master.put_message(make_msg(b"a"))
        assert no_slave.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        transfer.slave_connected()
        timed_out = await master.put_message(make_msg(b"b"))
        assert timed_out.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        not_waiting = await master.put_message(make_msg(b"c", wait_store_msg_ok=False))
        assert not_waiting.status is PutMessageStatus.PUT_OK
        results: list[PutMessageStatus] = []

        async def put() -> None:
            results.append((await master.put_message(make_msg(b"d"))).status)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(put)
            await wait_until(lambda: len(transfer.pending) == 1)
            end = transfer.pending[0].end_offset
            transfer.notify_transfer_some(end - 1)
            await trio.sleep(0.05)
            assert results == []
            transfer.notify_transfer_some(end)
        assert results == [PutMessageStatus.PUT_OK]
        transfer.push_to_slave_max_offset = 0  # a slave far behind
        far = dataclasses.replace(master_config, ha_slave_fallbehind_max=10)
        transfer.fallbehind_max = far.ha_slave_fallbehind_max
        behind = await master.put_message(make_msg(b"e"))
        assert behind.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
