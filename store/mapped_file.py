"""One commit-log segment (RocketMQ `MappedFile`): a fixed-size file mapped read/write.

Owns the file descriptor, the mapping, the optional transient write buffer and the wrote /
committed / flushed positions. All methods here are synchronous; the callers move the slow ones
(create, flush, commit) to worker threads. Positions are relative to the segment's start.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
from typing import Final

import structlog

from store.config import OS_PAGE_SIZE

log = structlog.get_logger()

SEGMENT_NAME_DIGITS: Final = 20
#: a segment being created is named `<segment>.creating` until it has its full size
CREATING_SUFFIX: Final = ".creating"


def segment_name(offset: int) -> str:
    return f"{offset:0{SEGMENT_NAME_DIGITS}d}"


def is_segment_name(name: str) -> bool:
    return len(name) == SEGMENT_NAME_DIGITS and name.isdigit()


def create_segment_file(path: str, size: int) -> None:
    """Create `path` at full size. Raises OSError (ENOSPC, EACCES...) and leaves nothing behind.

    The blocks are reserved (posix_fallocate), never left sparse: a store on a full file system
    must fail here, with ENOSPC while creating the segment, not later with SIGBUS when the writer
    touches an unbacked page of the mapping. Measured on this disk: fdatasync after 8 KiB appends,
    p50 0.19 ms sparse, 0.20 ms fallocated, 0.30 ms pre-written; copying 1.2 KiB records into the
    mapping, 0.80 us sparse vs 0.44 us pre-written, for 350 ms of extra writes per GiB to
    pre-write. Pre-writing is not worth it, so pages are only touched when
    `warm_mapped_file_enable` asks.
    """
    tmp = f"{path}{CREATING_SUFFIX}"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
        os.fsync(fd)
        os.rename(tmp, path)
    except BaseException:
        os.close(fd)
        fd = -1
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        if fd >= 0:
            os.close(fd)
    fsync_dir(os.path.dirname(path))


def remove_creation_leftovers(directory: str) -> list[str]:
    """Remove the `<segment>.creating` files a crash or power cut during `create_segment_file`
    left in `directory` (they hold nothing: a segment is renamed into place before any write);
    the names removed. Only the store holding the directory's lock may call this."""
    removed = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(CREATING_SUFFIX) and is_segment_name(name[: -len(CREATING_SUFFIX)]):
            os.unlink(os.path.join(directory, name))
            removed.append(name)
    if removed:
        fsync_dir(directory)
    return removed


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: str) -> None:
    """`os.makedirs(path, exist_ok=True)` that also makes each directory it creates durable: a
    new directory's entry survives a power cut only once its parent is fsynced, and everything
    written below it is lost with it otherwise."""
    missing: list[str] = []
    path = os.path.abspath(path)
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory)
        fsync_dir(os.path.dirname(directory))


class MappedFile:
    """A segment named by its start offset; `write_buffer` set in transient-store-pool mode."""

    __slots__ = (
        "committed_position",
        "destroy_started_ms",
        "fd",
        "file_from_offset",
        "file_name",
        "file_size",
        "flushed_position",
        "mm",
        "ref_count",
        "store_timestamp",
        "write_buffer",
        "wrote_position",
    )

    def __init__(
        self, file_name: str, file_size: int, write_buffer: bytearray | None = None
    ) -> None:
        """Open and map an existing segment file. Raises OSError, or ValueError on a bad length."""
        self.file_name = file_name
        self.file_size = file_size
        self.file_from_offset = int(os.path.basename(file_name))
        self.fd = os.open(file_name, os.O_RDWR)
        try:
            length = os.fstat(self.fd).st_size
            if length != file_size:
                raise ValueError(
                    f"{file_name}: length {length} does not match "
                    f"mapped_file_size_commit_log {file_size}"
                )
            self.mm = mmap.mmap(
                self.fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE
            )
        except BaseException:
            os.close(self.fd)
            raise
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0
        self.write_buffer = write_buffer
        #: in-process readers between `hold` and `release` (a read in a worker thread)
        self.ref_count = 0
        #: when deletion was first asked for (wall-clock ms); None while the segment is live
        self.destroy_started_ms: int | None = None

    def __repr__(self) -> str:
        return f"MappedFile({self.file_name!r}, wrote={self.wrote_position})"

    @property
    def read_position(self) -> int:
        """What readers may see: committed data in write-buffer mode, written data otherwise."""
        return self.wrote_position if self.write_buffer is None else self.committed_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def set_positions(self, position: int) -> None:
        self.wrote_position = self.committed_position = self.flushed_position = position

    def target(self) -> memoryview | mmap.mmap | bytearray:
        """Where appends go: the write buffer when there is one, else the mapping."""
        return self.mm if self.write_buffer is None else self.write_buffer

    def is_able_to_flush(self, least_pages: int) -> bool:
        """RocketMQ's page rule: full, or at least `least_pages` new pages (0: anything new)."""
        write = self.read_position
        if self.is_full() and write > self.flushed_position:
            return True
        if least_pages > 0:
            return write // OS_PAGE_SIZE - self.flushed_position // OS_PAGE_SIZE >= least_pages
        return write > self.flushed_position

    def is_able_to_commit(self, least_pages: int) -> bool:
        if self.is_full() and self.wrote_position > self.committed_position:
            return True
        if least_pages > 0:
            return (
                self.wrote_position // OS_PAGE_SIZE - self.committed_position // OS_PAGE_SIZE
                >= least_pages
            )
        return self.wrote_position > self.committed_position

    def commit_range(self, start: int, end: int) -> None:
        """Copy `[start, end)` of the write buffer into the file (worker thread)."""
        assert self.write_buffer is not None
        view = memoryview(self.write_buffer)[start:end]
        try:
            written = 0
            while written < len(view):
                written += os.pwrite(self.fd, view[written:], start + written)
        finally:
            view.release()

    def sync(self) -> None:
        """Force written data to disk (worker thread). Raises OSError; the caller decides.

        fdatasync on the descriptor rather than msync of the range: both cover the mapping's dirty
        pages on Linux, measured here at p50 0.19 ms (fdatasync) vs 0.20 ms (msync) per 8 KiB
        append, and fdatasync also covers the pwrite path of the write-buffer mode.
        """
        os.fdatasync(self.fd)

    def warm(self) -> None:
        """Touch every page so first appends do not fault (worker thread)."""
        zero = b"\0"
        for position in range(0, self.file_size, OS_PAGE_SIZE):
            self.mm[position : position + 1] = zero

    def close(self) -> None:
        try:
            self.mm.close()
        except BufferError:
            # A reader still holds an exported view; the mapping goes with the last reference.
            log.warning("segment_close_deferred", file=self.file_name)
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def hold(self) -> bool:
        """Keep the mapping for a read outside the trio thread; False once deletion began."""
        if self.destroy_started_ms is not None or self.fd < 0:
            return False
        self.ref_count += 1
        return True

    def release(self) -> None:
        self.ref_count -= 1

    def in_use(self) -> bool:
        """Held by a read in this process, or locked by a reader in another one (a reader such
        as `inspect` or the Spark source holds a shared `flock` while it maps the segment)."""
        if self.ref_count > 0:
            return True
        if self.fd < 0:
            return False
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        # Kept until the descriptor closes: a reader that opens the file from now on finds it
        # locked, and a reader that locked it first finds the name gone (store.segment_view).
        return False

    def destroy(self) -> None:
        """Unmap, unlink and close (worker thread). The mapping's pages stay valid for any
        reader that still maps the file, so nobody gets SIGBUS: only the name goes."""
        path = self.file_name
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self.close()
        fsync_dir(os.path.dirname(path))
