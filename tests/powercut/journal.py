"""What a power cut would take away: file bytes written since the file's last fsync, and
directory entries changed since their directory's last fsync.

The backing directory always holds the live state. For each file written since its last
fsync/fdatasync the journal keeps its size at that fsync and the pre-image of every page written
(or cut away by a truncate) since; for each directory operation not yet made durable by an fsync
of every directory it touched, how to undo it. A removed or replaced file is moved into a trash
directory beside the backing one (same file system), so an unlink that no directory fsync
covered can be undone. `power_cut` undoes all of it, newest first; `settle` (a clean unmount)
keeps all of it.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
from dataclasses import asdict, dataclass, field

import structlog

PAGE = 4096
SECTOR = 512

log = structlog.get_logger()


@dataclass(slots=True)
class FileUndo:
    """One file since its last fsync: the size it had then, and the pre-images of the pages
    changed since (only pages below that size: what lies above is undone by the truncate)."""

    synced_size: int
    pages: dict[int, bytes] = field(default_factory=dict)


@dataclass(slots=True)
class DirOp:
    """A directory operation not yet durable: `dirs` are the directories (inodes) whose fsync
    it still waits for. `path` is the entry created or removed (the source of a rename),
    `target` the new name of a rename, `trash` where a removed or replaced entry went."""

    kind: str
    dirs: set[int]
    ino: int
    path: str
    target: str = ""
    trash: str = ""


@dataclass(frozen=True, slots=True)
class Odds:
    """How a cut treats an unsynced page: `keep` is the chance that it reached the disk anyway,
    `tear` the chance that the last one of a file reached it in part (a prefix of sectors)."""

    rng: random.Random
    keep: float = 0.0
    tear: float = 0.0


@dataclass(slots=True)
class CutStats:
    files_reverted: int = 0
    pages_dropped: int = 0
    pages_kept: int = 0
    pages_torn: int = 0
    bytes_truncated: int = 0
    entries_undone: int = 0
    undo_failures: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class Journal:
    def __init__(self, root: str, trash: str) -> None:
        self.root = root
        self.trash = trash
        os.makedirs(trash, exist_ok=True)
        self.files: dict[int, FileUndo] = {}
        self.ops: list[DirOp] = []
        self._trash_seq = 0

    # -- file content -------------------------------------------------------------------

    def _undo_for(self, ino: int, fd: int) -> FileUndo:
        undo = self.files.get(ino)
        if undo is None:
            undo = self.files[ino] = FileUndo(os.fstat(fd).st_size)
        return undo

    def _capture(self, undo: FileUndo, fd: int, first: int, last: int) -> None:
        for page in range(first, last + 1):
            if page in undo.pages or page * PAGE >= undo.synced_size:
                continue
            undo.pages[page] = os.pread(fd, PAGE, page * PAGE)

    def before_write(self, ino: int, fd: int, offset: int, length: int) -> None:
        if length <= 0:
            return
        undo = self._undo_for(ino, fd)
        self._capture(undo, fd, offset // PAGE, (offset + length - 1) // PAGE)

    def before_truncate(self, ino: int, fd: int, size: int) -> None:
        undo = self._undo_for(ino, fd)
        current = os.fstat(fd).st_size
        if size < current:
            self._capture(undo, fd, size // PAGE, (current - 1) // PAGE)

    def created(self, ino: int) -> None:
        self.files[ino] = FileUndo(0)

    def synced(self, ino: int) -> None:
        self.files.pop(ino, None)

    # -- directory entries --------------------------------------------------------------

    def trash_path(self, name: str) -> str:
        self._trash_seq += 1
        return os.path.join(self.trash, f"{self._trash_seq:08d}-{name}")

    def record(self, op: DirOp) -> None:
        self.ops.append(op)

    def dir_synced(self, dir_ino: int) -> None:
        for op in self.ops:
            op.dirs.discard(dir_ino)
        self.ops = [op for op in self.ops if op.dirs]

    # -- the cut ------------------------------------------------------------------------

    def settle(self) -> None:
        """A clean unmount: everything written is kept."""
        self.files.clear()
        self.ops.clear()
        shutil.rmtree(self.trash, ignore_errors=True)

    def power_cut(self, odds: Odds) -> CutStats:
        """Undo what no fsync covered, newest first: entries, then file contents."""
        stats = CutStats()
        for op in reversed(self.ops):
            try:
                self._undo(op)
                stats.entries_undone += 1
            except OSError as exc:
                stats.undo_failures += 1
                log.warning("powercut_undo_failed", kind=op.kind, path=op.path, error=str(exc))
        by_ino = self._walk()
        for ino, undo in self.files.items():
            path = by_ino.get(ino)
            if path is not None:
                self._revert(path, undo, odds, stats)
        self.files.clear()
        self.ops.clear()
        shutil.rmtree(self.trash, ignore_errors=True)
        return stats

    def _undo(self, op: DirOp) -> None:
        if op.kind == "create":
            if os.lstat(op.path).st_ino == op.ino:
                os.unlink(op.path)
        elif op.kind == "mkdir":
            if os.lstat(op.path).st_ino == op.ino:
                shutil.rmtree(op.path)
        elif op.kind in ("unlink", "rmdir"):
            os.rename(op.trash, op.path)
        elif op.kind == "rename":
            os.rename(op.target, op.path)
            if op.trash:
                os.rename(op.trash, op.target)
        else:
            raise ValueError(op.kind)

    def _walk(self) -> dict[int, str]:
        found: dict[int, str] = {}
        for directory, _, names in os.walk(self.root):
            for name in names:
                path = os.path.join(directory, name)
                with contextlib.suppress(OSError):
                    found[os.lstat(path).st_ino] = path
        return found

    def _revert(self, path: str, undo: FileUndo, odds: Odds, stats: CutStats) -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            stats.bytes_truncated += max(0, size - undo.synced_size)
            last = max(undo.pages, default=-1)
            # pages to restore, read before the truncate changes anything
            current = {page: os.pread(fd, PAGE, page * PAGE) for page in undo.pages}
            os.ftruncate(fd, undo.synced_size)
            for page, image in sorted(undo.pages.items()):
                before = image[: undo.synced_size - page * PAGE]
                after = current[page][: len(before)].ljust(len(before), b"\0")
                if page == last and odds.rng.random() < odds.tear:
                    cut = odds.rng.randrange(1, max(2, len(before) // SECTOR)) * SECTOR
                    data = after[:cut] + before[cut:]
                    stats.pages_torn += 1
                elif odds.rng.random() < odds.keep:
                    data = after
                    stats.pages_kept += 1
                else:
                    data = before
                    stats.pages_dropped += int(before != after)
                os.pwrite(fd, data, page * PAGE)
        finally:
            os.close(fd)
        stats.files_reverted += 1
