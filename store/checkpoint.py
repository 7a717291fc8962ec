"""The small files beside the commit log: `checkpoint`, the topic-queue table snapshot,
`flushoffset` (the durable offset other processes read), `abort` and `lock`.

Owns their formats and atomic replacement (temp file, fsync, rename, fsync of the directory).
Knows no trio: the store calls the slow parts from worker threads, the reader from any process.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import struct
import sys
from dataclasses import dataclass
from typing import Any, Final

import msgpack  # type: ignore[import-untyped]

from store.errors import StoreLockedError
from store.mapped_file import fsync_dir, make_dirs

CHECKPOINT_FILE: Final = "checkpoint"
TOPIC_QUEUE_TABLE_FILE: Final = os.path.join("config", "topicQueueTable.msgpack")
FLUSH_OFFSET_FILE: Final = "flushoffset"
ABORT_FILE: Final = "abort"
LOCK_FILE: Final = "lock"
FLUSH_OFFSET_FILE_SIZE: Final = 4096
# flushoffset: int64 flushed offset at 0, int64 committed offset at 8, int64 segment size at 16.
FLUSH_OFFSET_LAYOUT: Final = struct.Struct(">qqq")


def atomic_write(path: str, data: bytes) -> None:
    """Replace `path` with `data` so a crash leaves the old or the new content, never a mix."""
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # a full disk must not also keep a half-written temp file
        raise
    fsync_dir(os.path.dirname(path) or ".")


def _read_msgpack(path: str) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as handle:
            value = msgpack.unpackb(handle.read(), strict_map_key=False)
    except (OSError, ValueError, msgpack.UnpackException):
        return None
    return value if isinstance(value, dict) else None


@dataclass(frozen=True, slots=True)
class StoreCheckpoint:
    """Store time and offset of the last data known flushed when the checkpoint was written."""

    physic_msg_timestamp: int = 0
    flushed_offset: int = 0

    @classmethod
    def load(cls, root: str) -> StoreCheckpoint | None:
        value = _read_msgpack(os.path.join(root, CHECKPOINT_FILE))
        if value is None:
            return None
        try:
            return cls(int(value["physic_msg_timestamp"]), int(value["flushed_offset"]))
        except (KeyError, TypeError, ValueError):
            return None

    def write(self, root: str) -> None:
        data = msgpack.packb(
            {
                "physic_msg_timestamp": self.physic_msg_timestamp,
                "flushed_offset": self.flushed_offset,
            }
        )
        atomic_write(os.path.join(root, CHECKPOINT_FILE), data)


@dataclass(frozen=True, slots=True)
class TopicQueueTableSnapshot:
    """The topic-queue table as it stood when the log ended at `offset` (all records below it),
    and where the last record before `offset` starts (-1: not known)."""

    offset: int
    table: dict[str, int]
    last_record: int = -1

    @classmethod
    def load(cls, root: str) -> TopicQueueTableSnapshot | None:
        value = _read_msgpack(os.path.join(root, TOPIC_QUEUE_TABLE_FILE))
        if value is None:
            return None
        try:
            table = {str(k): int(v) for k, v in value["table"].items()}
            return cls(int(value["offset"]), table, int(value.get("last_record", -1)))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def write(self, root: str) -> None:
        make_dirs(os.path.join(root, "config"))
        data = msgpack.packb(
            {"offset": self.offset, "table": self.table, "last_record": self.last_record}
        )
        atomic_write(os.path.join(root, TOPIC_QUEUE_TABLE_FILE), data)


class FlushOffsetFile:
    """The mapped `flushoffset` file: written by the store after each flush, read by anyone."""

    def __init__(self, root: str, *, writable: bool = True) -> None:
        path = os.path.join(root, FLUSH_OFFSET_FILE)
        flags = os.O_RDWR | os.O_CREAT if writable else os.O_RDONLY
        fd = os.open(path, flags, 0o644)
        try:
            if writable:
                # Reserved blocks, so writes through the mapping cannot SIGBUS on a full disk.
                os.posix_fallocate(fd, 0, FLUSH_OFFSET_FILE_SIZE)
            access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
            self.mm = mmap.mmap(fd, FLUSH_OFFSET_FILE_SIZE, access=access)
        finally:
            os.close(fd)
        # Each value is stored and loaded as one aligned 8-byte word, never byte by byte
        # (struct's big-endian packers are): a reader in another process must not see half of
        # an update, or it would take the middle of a record for the durable end.
        self._words = memoryview(self.mm).cast("Q")

    def update(self, flushed_offset: int, committed_offset: int, segment_size: int) -> None:
        words = self._words
        words[2] = _to_word(segment_size)
        words[1] = _to_word(committed_offset)
        words[0] = _to_word(flushed_offset)  # last: it vouches for the bytes below it

    def read(self) -> tuple[int, int, int]:
        """(flushed offset, committed offset, segment size)."""
        words = self._words
        return _from_word(words[0]), _from_word(words[1]), _from_word(words[2])

    def sync(self) -> None:
        self.mm.flush()

    def close(self) -> None:
        self._words.release()
        self.mm.close()


def _to_word(value: int) -> int:
    """`value` as the native word whose bytes are its big-endian int64 (the file's layout)."""
    return int.from_bytes(value.to_bytes(8, "big", signed=True), sys.byteorder)


def _from_word(word: int) -> int:
    return int.from_bytes(word.to_bytes(8, sys.byteorder), "big", signed=True)


def read_flush_offset(root: str) -> tuple[int, int, int] | None:
    """The flushoffset triple, or None when the file is missing or too short."""
    try:
        reader = FlushOffsetFile(root, writable=False)
    except (OSError, ValueError):
        return None
    try:
        return reader.read()
    finally:
        reader.close()


def acquire_lock(root: str) -> int:
    """Lock `<root>/lock` exclusively for this process; raises StoreLockedError if held."""
    path = os.path.join(root, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreLockedError(path) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def release_lock(fd: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def abort_file_exists(root: str) -> bool:
    return os.path.exists(os.path.join(root, ABORT_FILE))


def create_abort_file(root: str) -> None:
    path = os.path.join(root, ABORT_FILE)
    with open(path, "wb") as handle:
        os.fsync(handle.fileno())
    fsync_dir(root)


def remove_abort_file(root: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(root, ABORT_FILE))
    fsync_dir(root)
