"""`ConsumeService`: the consume side of a running store, started and stopped by the store.

Owns the consume-queue table, its repair at open, the dispatcher task and the reads a pull
makes (`get_message`, queue bounds). The store calls `ConsumeService.recover` after its own
recovery, starts `run` with its services, calls `wakeup` after every flush and `close` last.
The record bytes come from the store's own mappings. Under SYNC_FLUSH nothing past the durable
offset is dispatched; under ASYNC_FLUSH dispatch follows the writer, as RocketMQ's does (a
SIGKILL keeps written data in the page cache; only a power cut can take it back).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from store.consume_queue import DEFAULT_UNITS_PER_FILE
from store.dispatch import ConsumeQueueTable, Listener, ReputMessageService
from store.format import EncodedBatch
from store.get_message import GetMessageResult, TagFilter, get_message
from store.reader import CommitLogReader

if TYPE_CHECKING:
    from store.mapped_file_queue import MappedFileQueue


class ConsumeService:
    def __init__(
        self, table: ConsumeQueueTable, reput: ReputMessageService, files: MappedFileQueue
    ) -> None:
        self.table = table
        self.reput = reput
        self.files = files

    @classmethod
    def recover(
        cls,
        root: str,
        files: MappedFileQueue,
        units_per_file: int = DEFAULT_UNITS_PER_FILE,
        readable_end: Callable[[], int] | None = None,
    ) -> ConsumeService:
        """Load the queues, cut them to the recovered commit log, catch up to the readable end:
        `readable_end()` when given (the store's choice by flush mode), else the durable offset."""
        table = ConsumeQueueTable(root, units_per_file)
        resume = table.repair(files.min_offset, files.max_offset)
        reader = CommitLogReader(root, readable_end)
        reput = ReputMessageService(table, reader, resume)
        while reput.dispatch_once():
            pass
        reput.save()
        return cls(table, reput, files)

    def add_listener(self, listener: Listener) -> None:
        self.reput.listeners.append(listener)

    def wakeup(self) -> None:
        self.reput.wakeup()

    def note_appended(self, batch: EncodedBatch, wrote_offset: int, logics_offset: int) -> None:
        self.reput.note_appended(batch, wrote_offset, logics_offset)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.reput.run(task_status=task_status)

    def close(self) -> None:
        self.table.close()
        self.reput.reader.close()

    def read_bytes(self, offset: int, size: int) -> bytes | None:
        mapped = self.files.find_mapped_file_by_offset(offset)
        if mapped is None:
            return None
        pos = offset - mapped.file_from_offset
        if pos + size > mapped.file_size:
            return None
        return bytes(mapped.mm[pos : pos + size])

    def get_message(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_filter: TagFilter | None = None,
    ) -> GetMessageResult:
        return get_message(
            self.table,
            self.read_bytes,
            self.files.min_offset,
            topic,
            queue_id,
            offset,
            max_count=max_count,
            tag_filter=tag_filter,
        )

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.table.existing(topic, queue_id)
        return cq.min_logic_offset if cq else 0

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.table.existing(topic, queue_id)
        return cq.max_logic_offset if cq else 0
