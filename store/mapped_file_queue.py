"""The ordered segments of the commit log (RocketMQ `MappedFileQueue`).

Owns the list of `MappedFile`s, their loading and validation (length, no gaps), lookup by
offset, and the queue-level flushed / committed offsets. Flushing and committing call the
segment's slow operations through the caller's flusher and worker threads.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

import structlog
import trio

from store.errors import StoreLoadError
from store.mapped_file import (
    MappedFile,
    is_segment_name,
    remove_creation_leftovers,
    segment_name,
)

log = structlog.get_logger()

Flusher = Callable[[MappedFile], Awaitable[None]]


class MappedFileQueue:
    """Segments of one directory in offset order; the writer appends to the last one."""

    def __init__(
        self, store_path: str, mapped_file_size: int, *, write_buffers: bool = False
    ) -> None:
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        #: write-buffer mode: appends reach the files only when `commit` copies them
        self.write_buffers = write_buffers
        self.mapped_files: list[MappedFile] = []
        self.flushed_where = 0
        self.committed_where = 0
        self.store_timestamp = 0  # store time of the last flushed data
        # One flush and one commit at a time: a shutdown flush racing a periodic one must not
        # let the older one move the offsets back when it finishes last.
        self._flush_lock = trio.Lock()
        self._commit_lock = trio.Lock()

    def load(self) -> None:
        """Map every segment. Raises StoreLoadError naming the file on a bad length or a gap.
        Segments whose creation was cut short (`.creating`) are removed first."""
        for name in remove_creation_leftovers(self.store_path):
            log.warning("segment_creation_leftover_removed", file=name, dir=self.store_path)
        names = sorted(n for n in os.listdir(self.store_path) if is_segment_name(n))
        expected: int | None = None
        for name in names:
            path = os.path.join(self.store_path, name)
            offset = int(name)
            if offset % self.mapped_file_size:
                raise StoreLoadError(
                    path, f"offset is not a multiple of the segment size {self.mapped_file_size}"
                )
            if expected is not None and offset != expected:
                raise StoreLoadError(
                    path, f"gap between segments: expected {segment_name(expected)}"
                )
            length = os.path.getsize(path)
            if length != self.mapped_file_size:
                raise StoreLoadError(
                    path,
                    f"length {length} does not match "
                    f"mapped_file_size_commit_log {self.mapped_file_size}",
                )
            mapped_file = MappedFile(path, self.mapped_file_size)
            mapped_file.set_positions(self.mapped_file_size)
            self.mapped_files.append(mapped_file)
            expected = offset + self.mapped_file_size

    def close(self) -> None:
        for mapped_file in self.mapped_files:
            mapped_file.close()

    @property
    def last_mapped_file(self) -> MappedFile | None:
        return self.mapped_files[-1] if self.mapped_files else None

    @property
    def min_offset(self) -> int:
        return self.mapped_files[0].file_from_offset if self.mapped_files else 0

    @property
    def max_offset(self) -> int:
        """End of what readers may see (committed data in write-buffer mode)."""
        if self.write_buffers:
            # The commit point, not the last segment's: after a roll, the end of the previous
            # segment may still be waiting in its buffer.
            return self.committed_where
        last = self.last_mapped_file
        return last.file_from_offset + last.read_position if last else 0

    @property
    def max_wrote_offset(self) -> int:
        last = self.last_mapped_file
        return last.file_from_offset + last.wrote_position if last else 0

    def next_file_offset(self) -> int:
        last = self.last_mapped_file
        return last.file_from_offset + self.mapped_file_size if last else 0

    def find_mapped_file_by_offset(self, offset: int) -> MappedFile | None:
        if not self.mapped_files:
            return None
        index = (offset - self.mapped_files[0].file_from_offset) // self.mapped_file_size
        if 0 <= index < len(self.mapped_files):
            return self.mapped_files[index]
        return None

    def truncate_dirty_files(self, offset: int) -> list[MappedFile]:
        """Set positions to end at `offset`; remove (and return, closed) the segments after it."""
        kept: list[MappedFile] = []
        removed: list[MappedFile] = []
        for mapped_file in self.mapped_files:
            start = mapped_file.file_from_offset
            if start + self.mapped_file_size <= offset:
                mapped_file.set_positions(self.mapped_file_size)
                kept.append(mapped_file)
            elif start <= offset < start + self.mapped_file_size:
                mapped_file.set_positions(offset - start)
                kept.append(mapped_file)
            else:
                removed.append(mapped_file)
        # Newest first: a crash part-way leaves the kept segments gap-free, so the store opens.
        for mapped_file in reversed(removed):
            mapped_file.destroy()
        self.mapped_files = kept
        self.flushed_where = self.committed_where = offset
        return removed

    async def flush(self, least_pages: int, flusher: Flusher) -> bool:
        """Flush the segment holding `flushed_where` if the page rule allows; True if it did.

        The target position is taken before the flush, so data appended meanwhile is not claimed.
        Raises whatever the flusher raises (OSError); then nothing advances.
        """
        async with self._flush_lock:
            mapped_file = self.find_mapped_file_by_offset(self.flushed_where)
            if mapped_file is None or not mapped_file.is_able_to_flush(least_pages):
                return False
            target = mapped_file.read_position
            timestamp = mapped_file.store_timestamp
            await flusher(mapped_file)
            mapped_file.flushed_position = max(mapped_file.flushed_position, target)
            self.flushed_where = max(
                self.flushed_where, mapped_file.file_from_offset + mapped_file.flushed_position
            )
            self.store_timestamp = max(self.store_timestamp, timestamp)
            return True

    async def commit(self, least_pages: int) -> bool:
        """Copy new write-buffer data of the segment holding `committed_where` into its file."""
        async with self._commit_lock:
            return await self._commit(least_pages)

    async def _commit(self, least_pages: int) -> bool:
        mapped_file = self.find_mapped_file_by_offset(self.committed_where)
        if mapped_file is None or mapped_file.write_buffer is None:
            if (
                mapped_file is not None
                and mapped_file.committed_position < mapped_file.wrote_position
            ):
                mapped_file.committed_position = mapped_file.wrote_position
                self.committed_where = mapped_file.file_from_offset + mapped_file.committed_position
                return True
            return False
        if not mapped_file.is_able_to_commit(least_pages):
            return False
        start, end = mapped_file.committed_position, mapped_file.wrote_position
        await trio.to_thread.run_sync(mapped_file.commit_range, start, end)
        mapped_file.committed_position = end
        self.committed_where = mapped_file.file_from_offset + end
        return True
