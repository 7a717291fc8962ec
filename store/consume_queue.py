"""`ConsumeQueue`: the per-(topic, queue id) index of the commit log, in RocketMQ's file format.

Owns `<store_dir>/consumequeue/<topic>/<queueId>/<20-digit byte offset>` files of fixed size
(`units_per_file` 20-byte units, 300000 by default = 6,000,000 bytes). A unit is the commit-log
offset, the record size and the tags code of one message; the logical (queue) offset of a unit is
its byte position / 20. Files are zero-filled when created, so the end of a queue is the first
all-zero unit, as RocketMQ's ConsumeQueue.recover reads it. Knows nothing of trio or sockets;
the dispatcher appends, readers look units up. Mirrors store/ConsumeQueue.java (4.9).
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import structlog

from store.mapped_file import fsync_dir
from store.open_files import OpenFiles

# One unit, big-endian like every RocketMQ file:
CQ_UNIT: Final = struct.Struct(
    ">"
    "q"  # 0  commit-log (physical) offset of the record
    "i"  # 8  record total size
    "q"  # 12 tags code: Java String.hashCode of TAGS (0 without tags)
)
CQ_STORE_UNIT_SIZE: Final = 20
assert CQ_UNIT.size == CQ_STORE_UNIT_SIZE
DEFAULT_UNITS_PER_FILE: Final = 300_000

log = structlog.get_logger()


@dataclass(frozen=True, slots=True)
class CqUnit:
    """One consume-queue entry at logical offset `queue_offset`."""

    queue_offset: int
    physical_offset: int
    size: int
    tags_code: int


def _file_name(byte_offset: int) -> str:
    return f"{byte_offset:020d}"


class ConsumeQueue:
    """The units of one queue; `append` writes, `get`/`iter_units` read, `truncate_*` repair."""

    def __init__(
        self,
        root: str,
        topic: str,
        queue_id: int,
        units_per_file: int = DEFAULT_UNITS_PER_FILE,
        files: OpenFiles | None = None,
    ) -> None:
        """`files` holds the descriptors, shared by the queues of a store (a private one when
        not given, as in tests of one queue)."""
        self.topic = topic
        self.queue_id = queue_id
        self.dir = os.path.join(root, "consumequeue", topic, str(queue_id))
        self.file_size = units_per_file * CQ_STORE_UNIT_SIZE
        self.min_logic_offset = 0  # first logical offset still on disk
        self.max_logic_offset = 0  # next logical offset to be written
        self.max_physical_offset = 0  # commit-log end of the last unit (offset + size)
        self.holes_filled = 0  # units written below the end by re-dispatch (`_fill_hole`)
        self.files = files if files is not None else OpenFiles()
        self._private_files = files is None
        self._unsynced_dirs: set[str] = set()
        self._paths: dict[int, str] = {}
        self.destroyed = False
        self._load()

    # --- files --------------------------------------------------------------------------------

    def _bases(self) -> list[int]:
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        return sorted(int(n) for n in names if len(n) == 20 and n.isdigit())

    def _path(self, base: int) -> str:
        path = self._paths.get(base)
        if path is None:
            path = self._paths[base] = os.path.join(self.dir, _file_name(base))
        return path

    def _fd(self, base: int, create: bool = False) -> int | None:
        """The descriptor of the file at byte offset `base`; None when it does not exist and
        `create` is false."""
        path = self._path(base)
        try:
            return self.files.get(path, self._opener(create))
        except FileNotFoundError:
            return None

    def _opener(self, create: bool) -> Callable[[str], int]:
        def open_file(path: str) -> int:
            if not create:
                return os.open(path, os.O_RDWR)  # FileNotFoundError when absent
            if not os.path.exists(path):
                # The new name (and any directory made for it) is made durable by the next
                # flush: the dispatch offset saved after it must never outlive the file.
                topic_dir = os.path.dirname(self.dir)
                queues_dir = os.path.dirname(topic_dir)
                root = os.path.dirname(queues_dir)  # names consumequeue/ on its first file
                self._unsynced_dirs.update((self.dir, topic_dir, queues_dir, root))
            os.makedirs(self.dir, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            if os.fstat(fd).st_size < self.file_size:
                os.ftruncate(fd, self.file_size)  # zero-filled: an all-zero unit marks the end
            return fd

        return open_file

    def _write(self, base: int, data: bytes, position: int) -> None:
        """Write `data` at `position` of the file at `base`, created if needed; nothing once
        the queue is destroyed (its topic deleted: no file of it may come back)."""
        if self.destroyed:
            return
        fd = self._fd(base, create=True)
        assert fd is not None
        os.pwrite(fd, data, position)
        self.files.written(self._path(base))

    def _remove_file(self, base: int) -> None:
        path = self._path(base)
        self.files.forget(path)
        os.unlink(path)
        self._paths.pop(base, None)

    def destroy(self) -> None:
        """Remove every file and the directory of the queue (its topic was deleted); reads
        find nothing from now on and writes are dropped."""
        self.destroyed = True
        self.min_logic_offset = self.max_logic_offset = self.max_physical_offset = 0
        self._unsynced_dirs.clear()
        for base in self._bases():
            self._remove_file(base)
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(self.dir)

    def close(self) -> None:
        """Close this queue's files when it has its own; the store's shared ones are the
        table's to close."""
        if self._private_files:
            self.files.close_all()

    def _load(self) -> None:
        """Find the end: the first all-zero unit of the last non-empty file."""
        bases = self._bases()
        if not bases:
            return
        self.min_logic_offset = bases[0] // CQ_STORE_UNIT_SIZE
        for base in reversed(bases):
            fd = self._fd(base)
            assert fd is not None
            end = self._data_end(fd, self.file_size // CQ_STORE_UNIT_SIZE)
            if end > 0 or base == bases[0]:
                self.max_logic_offset = (base + end) // CQ_STORE_UNIT_SIZE
                if end > 0:
                    off, size, _ = CQ_UNIT.unpack(
                        os.pread(fd, CQ_STORE_UNIT_SIZE, end - CQ_STORE_UNIT_SIZE)
                    )
                    self.max_physical_offset = off + size
                return

    @staticmethod
    def _data_end(fd: int, units: int) -> int:
        """Byte position of the first all-zero unit of a file of `units` units: a binary search
        reading one unit per step (units are written in order), so opening a queue reads a few
        hundred bytes, not its whole file."""
        lo, hi = 0, units
        while lo < hi:
            mid = (lo + hi) // 2
            unit = os.pread(fd, CQ_STORE_UNIT_SIZE, mid * CQ_STORE_UNIT_SIZE)
            off, size, _ = CQ_UNIT.unpack(unit.ljust(CQ_STORE_UNIT_SIZE, b"\0"))
            if size == 0 and off == 0:
                hi = mid
            else:
                lo = mid + 1
        return lo * CQ_STORE_UNIT_SIZE

    # --- write --------------------------------------------------------------------------------

    def append(self, queue_offset: int, physical_offset: int, size: int, tags_code: int) -> bool:
        """Write the unit at `queue_offset`; False when it is already there (re-dispatch).

        A gap (queue_offset past the end) is filled from the end, as after a deleted
        queue; RocketMQ fills such holes with blank units and so do we (offset 0 is never read).
        """
        if queue_offset < self.max_logic_offset:
            return self._fill_hole(queue_offset, physical_offset, size, tags_code)
        if physical_offset + size <= self.max_physical_offset and self.max_logic_offset > 0:
            return False
        if queue_offset > self.max_logic_offset:
            log.warning(
                "consume_queue_gap",
                topic=self.topic,
                queue_id=self.queue_id,
                expected=self.max_logic_offset,
                got=queue_offset,
            )
            if self.max_logic_offset == 0 and not self._bases():
                self.min_logic_offset = queue_offset
        byte_pos = queue_offset * CQ_STORE_UNIT_SIZE
        base = byte_pos - byte_pos % self.file_size
        self._write(base, CQ_UNIT.pack(physical_offset, size, tags_code), byte_pos - base)
        self.max_logic_offset = queue_offset + 1
        self.max_physical_offset = physical_offset + size
        return True

    def _fill_hole(
        self, queue_offset: int, physical_offset: int, size: int, tags_code: int
    ) -> bool:
        """Re-dispatch of a unit below the end: rewrite it when the file does not hold it.

        A power cut can lose any page written after the last fdatasync, not only the last ones
        (and a 4 KiB page cuts units in two); the end found at load skips such a hole, and the
        commit log, which re-dispatch reads, is the authority on every unit."""
        if queue_offset < self.min_logic_offset:
            return False  # removed with its file: not brought back
        byte_pos = queue_offset * CQ_STORE_UNIT_SIZE
        base = byte_pos - byte_pos % self.file_size
        fd = self._fd(base, create=True)
        assert fd is not None
        unit = CQ_UNIT.pack(physical_offset, size, tags_code)
        if os.pread(fd, CQ_STORE_UNIT_SIZE, byte_pos - base) == unit:
            return False  # already there
        self._write(base, unit, byte_pos - base)
        if not self.holes_filled:
            log.warning(
                "consume_queue_hole_filled",
                topic=self.topic,
                queue_id=self.queue_id,
                queue_offset=queue_offset,
            )
        self.holes_filled += 1
        return True

    def append_run(self, units: list[tuple[int, int, int, int]]) -> bool:
        """Append units (queue offset, physical offset, size, tags code) that follow each other
        from `max_logic_offset`, one pwrite per file; anything else goes through `append`.
        True if any unit was written."""
        written = False
        index = 0
        while index < len(units):
            queue_offset = units[index][0]
            if queue_offset != self.max_logic_offset or self.max_logic_offset == 0:
                written |= self.append(*units[index])
                index += 1
                continue
            byte_pos = queue_offset * CQ_STORE_UNIT_SIZE
            base = byte_pos - byte_pos % self.file_size
            room = (base + self.file_size - byte_pos) // CQ_STORE_UNIT_SIZE
            run = [units[index]]
            while (
                len(run) < room
                and index + len(run) < len(units)
                and units[index + len(run)][0] == queue_offset + len(run)
            ):
                run.append(units[index + len(run)])
            data = b"".join(CQ_UNIT.pack(p, z, t) for _, p, z, t in run)
            self._write(base, data, byte_pos - base)
            last = run[-1]
            self.max_logic_offset = last[0] + 1
            self.max_physical_offset = last[1] + last[2]
            written = True
            index += len(run)
        return written

    def flush(self) -> None:
        """fdatasync the written files (every queue's sharing `files`), then this queue's new
        directory entries. Runs in a worker thread while dispatch goes on."""
        self.files.sync_all()
        self.sync_dirs()

    def sync_dirs(self) -> None:
        """fsync the directories of files created since the last call (worker thread)."""
        dirs, self._unsynced_dirs = self._unsynced_dirs, set()
        for path in sorted(dirs, key=len, reverse=True):  # the queue's directory first
            with contextlib.suppress(FileNotFoundError):  # its topic deleted meanwhile
                fsync_dir(path)

    # --- read ---------------------------------------------------------------------------------

    def get(self, queue_offset: int) -> CqUnit | None:
        units = self.read_units(queue_offset, 1)
        return units[0] if units else None

    def read_units(self, queue_offset: int, max_count: int) -> list[CqUnit]:
        """Up to `max_count` units from `queue_offset`, within one file (callers loop)."""
        if queue_offset < self.min_logic_offset or queue_offset >= self.max_logic_offset:
            return []
        count = min(max_count, self.max_logic_offset - queue_offset)
        byte_pos = queue_offset * CQ_STORE_UNIT_SIZE
        base = byte_pos - byte_pos % self.file_size
        count = min(count, (base + self.file_size - byte_pos) // CQ_STORE_UNIT_SIZE)
        fd = self._fd(base)
        if fd is None:
            return []
        data = os.pread(fd, count * CQ_STORE_UNIT_SIZE, byte_pos - base)
        return [
            CqUnit(queue_offset + i, *CQ_UNIT.unpack_from(data, i * CQ_STORE_UNIT_SIZE))
            for i in range(len(data) // CQ_STORE_UNIT_SIZE)
        ]

    # --- retention ----------------------------------------------------------------------------

    def delete_expired_files(self, phy_min: int) -> int:
        """Delete the files (never the last) whose last unit points below `phy_min`, the commit
        log's first offset: every record they index is gone. How many were deleted.

        Mirrors MappedFileQueue.deleteExpiredFileByOffset for a consume queue."""
        bases = self._bases()
        deleted = 0
        for base in bases[:-1]:
            fd = self._fd(base)
            if fd is None:
                break
            last = os.pread(fd, CQ_STORE_UNIT_SIZE, self.file_size - CQ_STORE_UNIT_SIZE)
            if len(last) < CQ_STORE_UNIT_SIZE or CQ_UNIT.unpack(last)[0] >= phy_min:
                break
            self._remove_file(base)
            deleted += 1
            log.info(
                "consume_queue_file_deleted",
                topic=self.topic,
                queue_id=self.queue_id,
                file=_file_name(base),
            )
        if deleted:
            first = bases[deleted] // CQ_STORE_UNIT_SIZE
            self.min_logic_offset = max(self.min_logic_offset, first)
        return deleted

    def correct_min_offset(self, phy_min: int) -> None:
        """Move the queue's minimum to its first unit pointing at or past `phy_min`, or to its
        end when none does (RocketMQ's correctMinOffset): pulls and GET_MIN_OFFSET then start at
        the oldest message still stored. A binary search, one unit read per step (units follow
        the log's order); the minimum never moves back."""
        lo, hi = self.min_logic_offset, self.max_logic_offset
        first = self.get(lo)
        if first is not None and first.size > 0 and first.physical_offset >= phy_min:
            return  # nothing below the log's start (the common case, one read)
        while lo < hi:
            mid = (lo + hi) // 2
            unit = self.get(mid)
            if unit is None or unit.size == 0 or unit.physical_offset < phy_min:
                lo = mid + 1
            else:
                hi = mid
        if lo > self.min_logic_offset:
            log.info(
                "consume_queue_min_offset_corrected",
                topic=self.topic,
                queue_id=self.queue_id,
                min_offset=lo,
            )
            self.min_logic_offset = lo

    # --- repair -------------------------------------------------------------------------------

    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Drop every unit whose record starts at or after `phy_offset` (the commit log's end).

        Mirrors ConsumeQueue.truncateDirtyLogicFiles: units are zeroed, emptied files removed.
        """
        while self.max_logic_offset > self.min_logic_offset:
            last = self.get(self.max_logic_offset - 1)
            # a hole (zero unit) at the tail is dirty too: dispatch refills it
            if last is None or (last.size > 0 and last.physical_offset < phy_offset):
                break
            self._zero_unit(self.max_logic_offset - 1)
            self.max_logic_offset -= 1
        prev = self.get(self.max_logic_offset - 1) if self.max_logic_offset > 0 else None
        self.max_physical_offset = prev.physical_offset + prev.size if prev else 0
        self._remove_files_after(self.max_logic_offset * CQ_STORE_UNIT_SIZE)

    def _zero_unit(self, queue_offset: int) -> None:
        byte_pos = queue_offset * CQ_STORE_UNIT_SIZE
        base = byte_pos - byte_pos % self.file_size
        if self._fd(base) is not None:
            self._write(base, bytes(CQ_STORE_UNIT_SIZE), byte_pos - base)

    def _remove_files_after(self, byte_end: int) -> None:
        for base in self._bases():
            if base >= byte_end and base > 0 and base > self.min_logic_offset * CQ_STORE_UNIT_SIZE:
                self._remove_file(base)
