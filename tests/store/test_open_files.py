"""`OpenFiles` and the store's consume-queue descriptors: bounded by configuration however many
queues there are, and no unit written before a saved dispatch offset left unsynced by closing."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import threading

import pytest

from store.config import FlushDiskType, MessageStoreConfig
from store.get_message import GetMessageStatus
from store.message_store import DefaultMessageStore
from store.open_files import OpenFiles

from .conftest import make_msg, wait_until


def open_rw(path: str) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


def fd_is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def record_syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files fdatasync is called on, from now on."""
    synced: list[str] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return synced


def test_the_least_recently_used_file_is_closed(tmp_path: pathlib.Path) -> None:
    files = OpenFiles(2)
    a, b, c = (str(tmp_path / name) for name in "abc")
    fd_a = files.get(a, open_rw)
    fd_b = files.get(b, open_rw)
    assert files.get(a, open_rw) == fd_a  # a hit: a is now the most recent
    files.get(c, open_rw)
    assert len(files) == 2 and files.opened == 3
    assert fd_is_open(fd_a) and not fd_is_open(fd_b)
    files.close_all()
    assert not fd_is_open(fd_a)


def test_a_file_closed_while_dirty_is_synced_through_its_name(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = record_syncs(monkeypatch)
    files = OpenFiles(1)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    os.pwrite(files.get(a, open_rw), b"unit", 0)
    files.written(a)
    files.get(b, open_rw)  # closes a, written and not synced
    files.sync_all()
    assert synced == [a]
    files.sync_all()
    assert synced == [a]  # once is enough
    files.forget(b)
    os.pwrite(files.get(a, open_rw), b"more", 4)
    files.written(a)
    files.forget(a)  # removed: nothing to sync
    files.sync_all()
    assert synced == [a]


def test_a_sync_in_a_thread_never_sees_its_descriptor_closed(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = OpenFiles(1)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    fd_a = files.get(a, open_rw)
    files.written(a)
    entered, release = threading.Event(), threading.Event()
    real = os.fdatasync
    seen: list[bool] = []

    def slow_fdatasync(fd: int) -> None:
        entered.set()
        release.wait(10)
        seen.append(fd_is_open(fd))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    syncing = threading.Thread(target=files.sync_all)
    syncing.start()
    assert entered.wait(10)
    files.get(b, open_rw)  # evicts a while its sync runs
    assert fd_is_open(fd_a)
    release.set()
    syncing.join(10)
    assert seen == [True] and not fd_is_open(fd_a)


def consume_queue_fds() -> int:
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        count += "/consumequeue/" in target
    return count


async def test_thousands_of_queues_take_a_bounded_number_of_descriptors(
    config: MessageStoreConfig,
) -> None:
    config = dataclasses.replace(
        config,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        mapped_file_size_commit_log=1 << 20,
        max_open_consume_queue_files=8,
        mapped_file_size_consume_queue=20 * 100,
    )
    topics = [f"Many{i}" for i in range(300)]
    async with DefaultMessageStore.open(config) as store:
        before = consume_queue_fds()
        for topic in topics:
            for queue_id in range(2):
                await store.put_message(make_msg(topic=topic, queue_id=queue_id, body=b"x"))
        consume = store.consume
        assert consume is not None
        await wait_until(lambda: consume.max_offset_in_queue(topics[-1], 1) == 1)
        assert consume_queue_fds() - before <= 8
        consume.reput.save()  # on the loop, as the store does: every unit synced, by name if closed
        for topic in topics:
            found = consume.get_message(topic, 1, 0, 4)
            assert found.status is GetMessageStatus.FOUND and len(found.messages) == 1
        assert consume_queue_fds() - before <= 8
    async with DefaultMessageStore.open(config) as again:
        reopened = again.consume
        assert reopened is not None
        assert consume_queue_fds() <= 8
        for topic in topics:
            assert reopened.max_offset_in_queue(topic, 0) == 1
