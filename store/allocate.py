"""Segment creation off the writer's path (RocketMQ `AllocateMappedFileService`) and the
transient store pool of write buffers (RocketMQ `TransientStorePool`).

Owns creating the next segment before it is needed, in a worker thread, and the store's
reaction when creation fails: the CREATE_MAPPED_FILE_FAILED running flag, one log event, and a
retry loop that clears the flag once a creation succeeds again (space freed by an operator).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import structlog
import trio

from store import status
from store.config import MessageStoreConfig
from store.mapped_file import MappedFile, create_segment_file, segment_name
from store.status import RunningFlags

log = structlog.get_logger()

CreateFile = Callable[[str, int], None]


class TransientStorePool:
    """Up to `size` segment-sized write buffers, allocated on first use and reused."""

    def __init__(self, size: int, buffer_size: int) -> None:
        self.size = size
        self.buffer_size = buffer_size
        self.allocated = 0
        self.free: list[bytearray] = []

    def borrow_buffer(self) -> bytearray | None:
        if self.free:
            return self.free.pop()
        if self.allocated < self.size:
            self.allocated += 1
            return bytearray(self.buffer_size)
        return None

    def return_buffer(self, buffer: bytearray) -> None:
        self.free.append(buffer)


class AllocateMappedFileService:
    """Hands the writer segment N and pre-creates N+1 in the background."""

    def __init__(
        self,
        config: MessageStoreConfig,
        running_flags: RunningFlags,
        create_file: CreateFile = create_segment_file,
        pool: TransientStorePool | None = None,
    ) -> None:
        self.config = config
        self.running_flags = running_flags
        self.create_file = create_file
        self.pool = pool
        self.created_count = 0
        self._ready: dict[int, MappedFile] = {}
        self._lock = trio.Lock()
        self._failed_offset: int | None = None
        self._failure_event = trio.Event()
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the pre-creation tasks and retry a failed creation until it succeeds."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            while True:
                await self._failure_event.wait()
                await trio.sleep(self.config.allocate_retry_interval_ms / 1000)
                offset = self._failed_offset
                if offset is not None and await self._prepare(offset, retry=True):
                    self._failed_offset = None
                    self._failure_event = trio.Event()
                    if self.running_flags.clear(status.CREATE_MAPPED_FILE_FAILED):
                        log.warning("segment_creation_recovered", offset=offset)

    async def get(self, offset: int) -> MappedFile | None:
        """The segment starting at `offset`, created now if not ready; None if creation failed."""
        if not await self._prepare(offset, retry=False):
            return None
        async with self._lock:
            mapped_file = self._ready.pop(offset)
        if self._nursery is not None:
            self._nursery.start_soon(
                self._precreate, offset + self.config.mapped_file_size_commit_log
            )
        return mapped_file

    async def _precreate(self, offset: int) -> None:
        await self._prepare(offset, retry=True)

    async def _prepare(self, offset: int, *, retry: bool) -> bool:
        async with self._lock:
            if offset in self._ready:
                return True
            path = os.path.join(self.config.store_path_commit_log, segment_name(offset))
            buffer = self.pool.borrow_buffer() if self.pool is not None else None
            try:
                mapped_file = await trio.to_thread.run_sync(self._create, path, buffer)
            except OSError as exc:
                if buffer is not None and self.pool is not None:
                    self.pool.return_buffer(buffer)
                if not retry:
                    self._creation_failed(offset, path, exc)
                return False
            self._ready[offset] = mapped_file
            self.created_count += 1
            return True

    def _create(self, path: str, buffer: bytearray | None) -> MappedFile:
        size = self.config.mapped_file_size_commit_log
        self.create_file(path, size)
        mapped_file = MappedFile(path, size, write_buffer=buffer)
        if self.config.warm_mapped_file_enable:
            mapped_file.warm()
        return mapped_file

    def _creation_failed(self, offset: int, path: str, exc: OSError) -> None:
        self._failed_offset = offset
        self._failure_event.set()
        if self.running_flags.set(status.CREATE_MAPPED_FILE_FAILED):
            log.error("segment_creation_failed", file=path, offset=offset, error=str(exc))

    def close(self) -> None:
        """Remove the pre-created segments that were never handed out: they hold nothing, and a
        stopped store's directory then ends with its last written segment."""
        for mapped_file in self._ready.values():
            try:
                mapped_file.destroy()
            except OSError as exc:
                log.warning("segment_remove_failed", file=mapped_file.file_name, error=str(exc))
        self._ready.clear()
