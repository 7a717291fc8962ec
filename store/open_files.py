"""`OpenFiles`: the consume-queue files open at one time, at most `capacity`, the least recently
used closed first.

Owns the descriptors of every consume-queue file of a store, so that thousands of topics do not
mean thousands of descriptors: a file is opened when a unit is written or read, and closed when
`capacity` others have been used since. Durability survives the closing: a file written since
its last fdatasync is synced by the next `sync_all` (the dispatch offset is saved only after it),
whether its descriptor is still open or was closed meanwhile (then it is reopened for the sync,
one at a time). `sync_all` runs in a worker thread while the trio thread opens and closes files:
the table is only touched under a lock, and a descriptor is never closed while a sync may be
using it (it waits in `_retired` until the sync ends).
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

#: default capacity; a queue reads and writes one file at a time, usually its last one
DEFAULT_CAPACITY: Final = 512


@dataclass(slots=True)
class _Entry:
    fd: int
    dirty: bool = False  # written since its last sync


class OpenFiles:
    """Descriptors by path, in least-recently-used order."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.opened = 0  # files opened so far: the misses
        self._lock = threading.Lock()
        self._open: collections.OrderedDict[str, _Entry] = collections.OrderedDict()
        #: closed while dirty: reopened and synced by `sync_all`
        self._dirty_closed: set[str] = set()
        #: evicted while a sync ran: closed (synced first if dirty) when that sync ends
        self._retired: list[tuple[str, _Entry]] = []
        self._syncing = False

    def __len__(self) -> int:
        return len(self._open)

    def get(self, path: str, opener: Callable[[str], int]) -> int:
        """The descriptor of `path`, opened with `opener(path)` when it is not open; may close
        the least recently used one. Raises what `opener` raises."""
        with self._lock:
            entry = self._open.get(path)
            if entry is not None:
                self._open.move_to_end(path)
                return entry.fd
        fd = opener(path)
        self.opened += 1
        with self._lock:
            self._open[path] = _Entry(fd)
            while len(self._open) > self.capacity:
                self._close(*self._open.popitem(last=False))
        return fd

    def written(self, path: str) -> None:
        """`path` was written. Call it after the write: a sync that began before then is not
        taken to cover it."""
        with self._lock:
            entry = self._open.get(path)
            if entry is not None:
                entry.dirty = True

    def forget(self, path: str) -> None:
        """Close `path` without syncing it: its file is being removed."""
        with self._lock:
            self._dirty_closed.discard(path)
            entry = self._open.pop(path, None)
            if entry is not None:
                entry.dirty = False
                self._close(path, entry)

    def close_all(self) -> None:
        """Close everything (the store is closing; the last `sync_all` came before)."""
        with self._lock:
            entries = [entry for _, entry in self._retired] + list(self._open.values())
            self._open.clear()
            self._retired = []
        for entry in entries:
            os.close(entry.fd)

    def _close(self, path: str, entry: _Entry) -> None:
        """Under the lock: close now, or once the running sync ends; a dirty file is synced
        later through its name, so closing loses no durability."""
        if self._syncing:
            self._retired.append((path, entry))
            return
        if entry.dirty:
            self._dirty_closed.add(path)
        os.close(entry.fd)

    def sync_all(self) -> None:
        """fdatasync every file written since its last sync (worker thread). Raises OSError;
        what was not synced stays marked, and the next call tries again."""
        with self._lock:
            self._syncing = True
            open_dirty = [(path, entry) for path, entry in self._open.items() if entry.dirty]
            for _, entry in open_dirty:
                entry.dirty = False
            closed_dirty, self._dirty_closed = self._dirty_closed, set()
        pending = [path for path, _ in open_dirty] + sorted(closed_dirty)
        try:
            for path, entry in open_dirty:
                os.fdatasync(entry.fd)
                pending.remove(path)
            for path in sorted(closed_dirty):
                _sync_path(path)
                pending.remove(path)
        finally:
            with self._lock:
                self._syncing = False
                self._dirty_closed.update(pending)  # tried again next time
                retired, self._retired = self._retired, []
            for path, entry in retired:
                if entry.dirty:
                    with self._lock:
                        self._dirty_closed.add(path)
                os.close(entry.fd)


def _sync_path(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return  # removed since (retention, truncation): nothing left to make durable
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)
