"""The power-cut file system itself, with real mmap and real syscalls through the mount: what
no fsync covered is gone after a cut (file pages, sizes, new, renamed and removed entries), what
one covered is kept, and fsync fails with EIO while asked to."""

from __future__ import annotations

import errno
import mmap
import os
import pathlib

import pytest

from tests.powercut.mount import PowerCutFS

SIZE = 64 * 1024


def fsync_path(path: pathlib.Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_file(fs: PowerCutFS, name: str, data: bytes) -> pathlib.Path:
    """A file whose content and directory entry are both synced."""
    path = fs.mountpoint / name
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    fsync_path(fs.mountpoint)
    return path


def power_cycle(fs: PowerCutFS) -> dict[str, int]:
    stats = fs.cut()
    fs.mount()
    return stats


@pytest.mark.parametrize("sync", ["fdatasync", "msync"])
def test_mmap_page_not_synced_is_lost_and_synced_one_kept(powercut: PowerCutFS, sync: str) -> None:
    path = durable_file(powercut, "segment", bytes(SIZE))
    fd = os.open(path, os.O_RDWR)
    mm = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    mm[100:105] = b"kept!"
    if sync == "fdatasync":
        os.fdatasync(fd)
    else:
        mm.flush()
    mm[8192:8197] = b"lost!"
    mm[SIZE - 5 :] = b"lost!"
    mm.close()
    os.close(fd)  # the kernel hands the dirty pages over now at the latest: still not synced
    stats = power_cycle(powercut)
    data = path.read_bytes()
    assert len(data) == SIZE
    assert data[100:105] == b"kept!"
    assert data[8192:8197] == bytes(5)
    assert data[SIZE - 5 :] == bytes(5)
    assert stats["pages_dropped"] == 2


def test_written_bytes_and_growth_without_fsync_are_lost(powercut: PowerCutFS) -> None:
    path = durable_file(powercut, "log", b"a" * 5000)
    with open(path, "r+b") as handle:
        handle.seek(4000)
        handle.write(b"b" * 3000)  # over the end of the synced part and past it
    with open(path, "ab") as handle:
        handle.write(b"c" * 9000)
    assert path.stat().st_size == 16000
    power_cycle(powercut)
    assert path.read_bytes() == b"a" * 5000


def test_truncate_without_fsync_is_undone(powercut: PowerCutFS) -> None:
    path = durable_file(powercut, "config", b"x" * 10000)
    os.truncate(path, 10)
    with open(path, "wb") as handle:  # O_TRUNC
        handle.write(b"short")
    power_cycle(powercut)
    assert path.read_bytes() == b"x" * 10000


def test_new_file_disappears_unless_its_directory_was_synced(powercut: PowerCutFS) -> None:
    durable = powercut.mountpoint / "queue"
    durable.mkdir()
    fsync_path(powercut.mountpoint)
    for name in ("kept", "lost"):  # the directory is synced after the first only
        with open(durable / name, "wb") as handle:
            handle.write(name.encode())
            handle.flush()
            os.fsync(handle.fileno())
        if name == "kept":
            fsync_path(durable)
    (powercut.mountpoint / "newdir").mkdir()  # its parent never synced
    (powercut.mountpoint / "newdir" / "f").write_bytes(b"f")
    fsync_path(powercut.mountpoint / "newdir")
    stats = power_cycle(powercut)
    assert sorted(os.listdir(durable)) == ["kept"]
    assert (durable / "kept").read_bytes() == b"kept"
    assert sorted(os.listdir(powercut.mountpoint)) == ["queue"]
    assert stats["entries_undone"] == 2  # "lost" and "newdir" (whose own fsync covers "f")


def test_rename_not_synced_is_undone_and_the_replaced_file_comes_back(
    powercut: PowerCutFS,
) -> None:
    target = durable_file(powercut, "topics.json", b"old")
    tmp = powercut.mountpoint / "topics.json.tmp"
    with open(tmp, "wb") as handle:
        handle.write(b"new")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, target)
    assert target.read_bytes() == b"new"
    power_cycle(powercut)
    assert os.listdir(powercut.mountpoint) == ["topics.json"]
    assert target.read_bytes() == b"old"
    # the same with the directory synced after the rename: the new file stays
    with open(tmp, "wb") as handle:
        handle.write(b"new")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, target)
    fsync_path(powercut.mountpoint)
    power_cycle(powercut)
    assert os.listdir(powercut.mountpoint) == ["topics.json"]
    assert target.read_bytes() == b"new"


def test_unlink_not_synced_comes_back_with_its_synced_content(powercut: PowerCutFS) -> None:
    path = durable_file(powercut, "segment", b"s" * 8192)
    gone = durable_file(powercut, "old", b"o")
    with open(path, "r+b") as handle:
        handle.write(b"unsynced")
    path.unlink()
    gone.unlink()
    fsync_path(powercut.mountpoint)  # covers both unlinks: nothing comes back
    assert os.listdir(powercut.mountpoint) == []
    path = durable_file(powercut, "segment", b"s" * 8192)
    with open(path, "r+b") as handle:
        handle.write(b"unsynced")
    path.unlink()
    power_cycle(powercut)
    assert os.listdir(powercut.mountpoint) == ["segment"]
    assert path.read_bytes() == b"s" * 8192


def test_fsync_fails_with_eio_while_asked_and_nothing_becomes_durable(
    powercut: PowerCutFS,
) -> None:
    path = durable_file(powercut, "data", b"1" * 4096)
    powercut.set_eio(True)
    with open(path, "r+b") as handle:
        handle.write(b"2" * 4096)
        handle.flush()
        with pytest.raises(OSError) as failure:
            os.fdatasync(handle.fileno())
        assert failure.value.errno == errno.EIO
    with pytest.raises(OSError):
        fsync_path(powercut.mountpoint)
    assert powercut.set_eio(False) == 2
    power_cycle(powercut)
    assert path.read_bytes() == b"1" * 4096


def test_torn_last_page_keeps_a_sector_prefix_of_the_new_bytes(powercut: PowerCutFS) -> None:
    path = durable_file(powercut, "data", b"o" * 8192)
    with open(path, "r+b") as handle:
        handle.write(b"n" * 8192)
    stats = powercut.cut(seed=3, tear=1.0)
    powercut.mount()
    data = path.read_bytes()
    assert stats["pages_torn"] == 1
    assert data[:4096] == b"o" * 4096  # the first page is dropped whole
    torn = data[4096:]
    cut = torn.index(b"o")
    assert cut % 512 == 0 and 0 < cut < 4096
    assert torn == b"n" * cut + b"o" * (4096 - cut)
