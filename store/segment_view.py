"""Read-only mappings of commit-log segments that the store's cleanup waits for.

Owns the readers' half of the deletion handshake. A reader in any process (the store's own
dispatcher excepted, `inspect`, the Spark source) maps a segment under a shared `flock`; the
cleanup deletes a segment only when it can take the exclusive lock (`MappedFile.in_use`), or
once `destroy_mapped_file_interval_forcibly` has passed. Deleting is an unlink, never a
truncation, so a mapping outlives its file's name: a reader that kept mapping a segment past
the forcible interval goes on reading valid pages, and one that comes later gets None, never
SIGBUS. Imports nothing beyond the standard library (Spark executors import it).
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os


class SegmentView:
    """A segment mapped read-only; `close()` releases the mapping and the shared lock."""

    __slots__ = ("fd", "mm", "path")

    def __init__(self, path: str, fd: int, mm: mmap.mmap) -> None:
        self.path = path
        self.fd = fd
        self.mm = mm

    def __len__(self) -> int:
        return len(self.mm)

    def close(self) -> None:
        """Unmap and unlock. A mapping still exported (a numpy view of it, say) is left to the
        garbage collector: closing it would raise BufferError over whatever error is on its way."""
        with contextlib.suppress(BufferError):
            self.mm.close()
        if self.fd >= 0:
            os.close(self.fd)  # releases the shared lock
            self.fd = -1

    def __enter__(self) -> SegmentView:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def open_segment(path: str) -> SegmentView | None:
    """`path` mapped read-only under a shared lock, or None when the segment is gone or its
    deletion has begun. An empty file (a segment being created) is None too.

    Raises OSError for anything but the file's absence (EACCES, EIO...).
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # the cleanup holds it: the segment is being deleted
            return None
        if not _still_named(path, fd):
            os.close(fd)  # unlinked between our open and our lock
            return None
        if os.fstat(fd).st_size == 0:
            os.close(fd)
            return None
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise
    return SegmentView(path, fd, mm)


def _still_named(path: str, fd: int) -> bool:
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)
