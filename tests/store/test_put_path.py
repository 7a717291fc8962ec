"""Every check before the writer, each with its own status; the writer channel; segment failures."""

from __future__ import annotations

import dataclasses
import errno

import trio
from structlog.testing import capture_logs

from store import status
from store.config import BrokerRole, MessageStoreConfig
from store.mapped_file import create_segment_file
from store.message import TRANSACTION_PREPARED_TYPE
from store.message_store import DefaultMessageStore
from store.status import PutMessageStatus
from tests.store.conftest import DEADLINE_S, StuckCreate, make_msg, wait_until


async def test_put_after_shutdown(config: MessageStoreConfig) -> None:
    async with DefaultMessageStore.open(config) as store:
        assert (await store.put_message(make_msg())).status is PutMessageStatus.PUT_OK
    assert (await store.put_message(make_msg())).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert store.stats.put_count_by_status[PutMessageStatus.SERVICE_NOT_AVAILABLE] == 1


async def test_slave_refuses(config: MessageStoreConfig) -> None:
    config = dataclasses.replace(config, broker_role=BrokerRole.SLAVE)
    async with DefaultMessageStore.open(config) as store:
        assert (
            await store.put_message(make_msg())
        ).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert store.max_offset == 0


async def test_disk_full_refuses_and_clears(config: MessageStoreConfig) -> None:
    async with DefaultMessageStore.open(config) as store:
        store.disk.apply(0.95)
        assert (
            await store.put_message(make_msg())
        ).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        store.disk.apply(0.50)
        assert (await store.put_message(make_msg())).status is PutMessageStatus.PUT_OK


async def test_disk_full_clears_only_under_the_clean_forcibly_ratio(
    config: MessageStoreConfig,
) -> None:
    async with DefaultMessageStore.open(config) as store:
        with capture_logs() as logs:
            for ratio in (0.95, 0.88, 0.93, 0.86, 0.91):  # hovering around the warning level
                store.disk.apply(ratio)
                assert store.running_flags.is_set(status.DISK_FULL), ratio
            store.disk.apply(0.84)
            assert not store.running_flags.is_set(status.DISK_FULL)
        assert [e["event"] for e in logs] == ["disk_full", "disk_space_recovered"]


async def test_periodic_disk_check(config: MessageStoreConfig) -> None:
    config = dataclasses.replace(
        config, disk_space_warning_level_ratio=0.001, disk_check_interval_ms=20
    )
    async with DefaultMessageStore.open(config) as store:
        await wait_until(lambda: not store.running_flags.is_writeable())
        assert store.running_flags.is_set(status.DISK_FULL)
        assert (
            await store.put_message(make_msg())
        ).status is PutMessageStatus.SERVICE_NOT_AVAILABLE


async def test_size_checks(config: MessageStoreConfig) -> None:
    config = dataclasses.replace(config, max_message_size=1024)
    async with DefaultMessageStore.open(config) as store:

        async def put(**fields: object) -> PutMessageStatus:
            return (await store.put_message(make_msg(**fields))).status  # type: ignore[arg-type]

        assert await put(topic="t" * 127) is PutMessageStatus.PUT_OK
        assert await put(topic="t" * 128) is PutMessageStatus.MESSAGE_ILLEGAL
        assert await put(topic="é" * 64) is PutMessageStatus.MESSAGE_ILLEGAL  # 128 UTF-8 bytes
        assert await put(properties="k\x01" + "v" * 32766) is PutMessageStatus.MESSAGE_ILLEGAL
        assert (
            await put(properties="k\x01" + "é" * 20000) is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
        )
        assert await put(body=b"x" * 1025) is PutMessageStatus.MESSAGE_ILLEGAL
        # recovery reads NUL in these fields as a torn write, so they are never stored
        assert await put(properties="k\x01v\x00") is PutMessageStatus.MESSAGE_ILLEGAL
        assert await put(topic="T\x00") is PutMessageStatus.MESSAGE_ILLEGAL
        assert await put(body=b"x" * 1024) is PutMessageStatus.PUT_OK
        batch_status = (
            await store.put_messages([make_msg(b"x" * 600), make_msg(b"y" * 600)])
        ).status
        assert batch_status is PutMessageStatus.MESSAGE_ILLEGAL
        mixed = [make_msg(queue_id=0), make_msg(queue_id=1)]
        assert (await store.put_messages(mixed)).status is PutMessageStatus.MESSAGE_ILLEGAL
        prepared = [make_msg(sys_flag=TRANSACTION_PREPARED_TYPE)]
        assert (await store.put_messages(prepared)).status is PutMessageStatus.MESSAGE_ILLEGAL
        assert (await store.put_messages([])).status is PutMessageStatus.MESSAGE_ILLEGAL
        assert store.topic_queue_table == {"T1-0": 1, f"{'t' * 127}-0": 1}


async def test_os_page_cache_busy(config: MessageStoreConfig) -> None:
    config = dataclasses.replace(config, os_page_cache_busy_timeout_ms=50)
    create = StuckCreate()
    async with DefaultMessageStore.open(config, create_file=create) as store:
        with trio.fail_after(DEADLINE_S / 2):
            async with trio.open_nursery() as nursery:
                first: list[PutMessageStatus] = []

                async def put_first() -> None:
                    first.append((await store.put_message(make_msg())).status)

                nursery.start_soon(put_first)
                await trio.to_thread.run_sync(create.entered.wait, DEADLINE_S)
                assert not first  # the writer is inside segment creation
                await wait_until(store.is_os_page_cache_busy, DEADLINE_S)  # past the 50 ms
                assert (
                    await store.put_message(make_msg())
                ).status is PutMessageStatus.OS_PAGE_CACHE_BUSY
                create.released.set()
        assert first == [PutMessageStatus.PUT_OK]
        assert not store.is_os_page_cache_busy()


async def test_writer_queue_full(config: MessageStoreConfig) -> None:
    config = dataclasses.replace(config, put_queue_capacity=2)
    statuses: list[PutMessageStatus] = []
    create = StuckCreate()
    async with DefaultMessageStore.open(config, create_file=create) as store:

        async def put() -> None:
            statuses.append((await store.put_message(make_msg())).status)

        with trio.fail_after(DEADLINE_S / 2):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(put)
                # the writer took the first put and is stuck creating a segment
                await trio.to_thread.run_sync(create.entered.wait, DEADLINE_S)
                for _ in range(5):
                    nursery.start_soon(put)
                await wait_until(lambda: len(statuses) == 3, DEADLINE_S)
                assert statuses == [PutMessageStatus.WRITER_QUEUE_FULL] * 3
                assert store.writer_queue_depth == 2
                create.released.set()
    assert statuses.count(PutMessageStatus.WRITER_QUEUE_FULL) == 3
    assert statuses.count(PutMessageStatus.PUT_OK) == 3


async def test_segment_creation_failure_then_recovery(config: MessageStoreConfig) -> None:
    config = dataclasses.replace(config, allocate_retry_interval_ms=20)
    failing = {"left": 3}

    def create(path: str, size: int) -> None:
        if failing["left"] > 0:
            failing["left"] -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        create_segment_file(path, size)

    with capture_logs() as logs:
        async with DefaultMessageStore.open(config, create_file=create) as store:
            first = await store.put_message(make_msg())
            assert first.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
            assert first.append_result is None
            assert not store.running_flags.is_writeable()
            assert (
                await store.put_message(make_msg())
            ).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
            await wait_until(store.running_flags.is_writeable)
            result = await store.put_message(make_msg())
            assert result.status is PutMessageStatus.PUT_OK
            assert result.append_result is not None and result.append_result.logics_offset == 0
    events = [entry["event"] for entry in logs]
    assert events.count("segment_creation_failed") == 1
    assert events.count("segment_creation_recovered") == 1


async def test_cancelled_put_is_not_answered_twice(config: MessageStoreConfig) -> None:
    async with DefaultMessageStore.open(config) as store:
        with trio.move_on_after(0):
            await store.put_message(make_msg())
        assert (await store.put_message(make_msg())).status is PutMessageStatus.PUT_OK
