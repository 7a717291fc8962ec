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
from typing import TYPE_CHECKING, Final

import structlog
import trio

from store.consume_queue import DEFAULT_UNITS_PER_FILE
from store.decode import CommitLogRecord
from store.deleted_topics import DeletedTopics
from store.dispatch import ConsumeQueueTable, Listener, ReputMessageService
from store.encode import EncodedBatch
from store.get_message import GetMessageResult, TagFilter, get_message, with_large
from store.index.query import QueryMessageResult, query_messages, read_raw_record_at
from store.index.runner import run_index
from store.index.service import IndexService
from store.layout import SYSFLAG_POS, store_timestamp_pos
from store.lookup import LOOP_READ_MAX_BYTES, read_held, read_record_at
from store.message import BORNHOST_V6_FLAG
from store.open_files import DEFAULT_CAPACITY
from store.reader import CommitLogReader

if TYPE_CHECKING:
    from store.mapped_file_queue import MappedFileQueue

#: bytes from a record's start to the end of its store timestamp, with the longer (IPv6) born host
_TIMESTAMP_END_MAX: Final = store_timestamp_pos(BORNHOST_V6_FLAG) + 8

log = structlog.get_logger()


class ConsumeService:
    def __init__(
        self,
        table: ConsumeQueueTable,
        reput: ReputMessageService,
        files: MappedFileQueue,
        index: IndexService | None = None,
    ) -> None:
        self.table = table
        self.reput = reput
        self.files = files
        #: the message index (`store.index`), None when `message_index_enable` is off
        self.index = index
        if index is not None:
            reput.listeners.append(index.wakeup)

    @classmethod
    def recover(
        cls,
        root: str,
        files: MappedFileQueue,
        units_per_file: int = DEFAULT_UNITS_PER_FILE,
        readable_end: Callable[[], int] | None = None,
        max_open_files: int = DEFAULT_CAPACITY,
        *,
        index: IndexService | None = None,
    ) -> ConsumeService:
        """Load the queues, cut them to the recovered commit log, catch up to the readable end:
        `readable_end()` when given (the store's choice by flush mode), else the durable offset.
        The `index`, opened already, follows the dispatch once `run` starts."""
        deleted = DeletedTopics.load(root, files.min_offset)
        table = ConsumeQueueTable(root, units_per_file, max_open_files, deleted)
        resume = table.repair(files.min_offset, files.max_offset)
        reader = CommitLogReader(root, readable_end)
        reput = ReputMessageService(table, reader, resume)
        while reput.dispatch_once():
            pass
        reput.save()
        for queue in table.queues.values():
            # Retention may have moved the log's start since the queues were written.
            queue.correct_min_offset(files.min_offset)
        return cls(table, reput, files, index)

    @property
    def dispatched_offset(self) -> int:
        """Everything below this commit-log offset is in the consume queues."""
        return self.reput.reput_from_offset

    def release_segments_below(self, offset: int) -> None:
        """The dispatcher's own mappings of segments ending at or below `offset` are dropped:
        retention is about to delete them."""
        self.reput.reader.release_below(offset)
        if self.index is not None:
            self.index.release_below(offset)

    def delete_topic(
        self, topic: str, topic_queue_table: dict[str, int], wrote_end: int, min_offset: int
    ) -> list[int]:
        """A deleted topic's consume queues are destroyed and its entries leave the commit
        log's `topic_queue_table`, so a topic created again starts at queue offset 0. Its
        records stay in the commit log, marked as deleted below `wrote_end` (the log's end,
        `store.deleted_topics`) so that neither the dispatcher nor a restart brings them back
        into a queue; the mark is made durable before any file goes. The queue ids removed;
        raises OSError when the mark cannot be written (nothing done)."""
        self.table.deleted.mark(topic, wrote_end, min_offset)
        prefix = f"{topic}-"
        for key in [k for k in topic_queue_table if k.startswith(prefix)]:
            if key[len(prefix) :].isdigit():
                del topic_queue_table[key]
        removed = self.table.remove_topic(topic)
        log.info("topic_queues_deleted", topic=topic, queue_ids=removed)
        return removed

    def add_listener(self, listener: Listener) -> None:
        self.reput.listeners.append(listener)

    def wakeup(self) -> None:
        self.reput.wakeup()

    def note_appended(self, batch: EncodedBatch, wrote_offset: int, logics_offset: int) -> None:
        self.reput.note_appended(batch, wrote_offset, logics_offset)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            if self.index is not None:
                await nursery.start(run_index, self.index, lambda: self.reput.reput_from_offset)
            await nursery.start(self.reput.run)
            task_status.started()

    def close(self) -> None:
        self.table.close()
        self.reput.reader.close()
        if self.index is not None:
            self.index.close()

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
        *,
        tag_filter: TagFilter | None = None,
        loop_read_max: int | None = None,
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
            loop_read_max=loop_read_max,
        )

    async def pull(
        self, topic: str, queue_id: int, offset: int, max_count: int, tag_filter: TagFilter
    ) -> GetMessageResult:
        """`get_message` for a pull: a record over `LOOP_READ_MAX_BYTES` is copied by `pread`
        in a worker thread while its segment is held, so neither the copy nor a page fault on
        a cold page stops the event loop; smaller ones are read from the mapping."""
        result = self.get_message(
            topic,
            queue_id,
            offset,
            max_count,
            tag_filter=tag_filter,
            loop_read_max=LOOP_READ_MAX_BYTES,
        )
        unit = result.large
        if unit is None:
            return result
        return with_large(
            result, await self._read_held(unit.physical_offset, unit.size), tag_filter
        )

    async def _read_held(self, offset: int, size: int) -> bytes | None:
        mapped = self.files.find_mapped_file_by_offset(offset)
        if mapped is None:
            return None
        return await read_held(mapped, offset - mapped.file_from_offset, size)

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.table.existing(topic, queue_id)
        return cq.min_logic_offset if cq else 0

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.table.existing(topic, queue_id)
        return cq.max_logic_offset if cq else 0

    def store_timestamp_at(self, topic: str, queue_id: int, offset: int) -> int | None:
        """The store time of the message at logical `offset`, or None when it is gone."""
        cq = self.table.existing(topic, queue_id)
        unit = cq.get(offset) if cq is not None else None
        if unit is None:
            return None
        # Only the fixed part up to the store timestamp (IPv6 born host at most), not the body.
        data = self.read_bytes(unit.physical_offset, min(unit.size, _TIMESTAMP_END_MAX))
        if data is None or len(data) < SYSFLAG_POS + 4:
            return None
        sys_flag = int.from_bytes(data[SYSFLAG_POS : SYSFLAG_POS + 4], "big")
        position = store_timestamp_pos(sys_flag)
        return int.from_bytes(data[position : position + 8], "big", signed=True)

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: the first logical offset stored at or after
        `timestamp_ms` (store times grow with offsets); the max offset when none is."""
        lo = self.min_offset_in_queue(topic, queue_id)
        hi = self.max_offset_in_queue(topic, queue_id)
        while lo < hi:
            mid = (lo + hi) // 2
            stamp = self.store_timestamp_at(topic, queue_id, mid)
            if stamp is None or stamp < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    async def look_message_by_offset(
        self, offset: int, max_message_size: int
    ) -> CommitLogRecord | None:
        """The record starting at commit-log `offset` (a consumer's send back names it), or None
        when nothing valid starts there. The offset is checked against the log before anything
        is copied, and a large record is read off the event loop (`store.lookup`)."""
        return await read_record_at(
            self.files, offset, self.reput.reader.durable_offset(), max_message_size
        )


async def query_message(
    consume: ConsumeService,
    *,
    topic: str,
    key: str,
    max_num: int,
    begin: int,
    end: int,
    max_message_size: int,
) -> QueryMessageResult:
    """QUERY_MESSAGE: the records of `topic` carrying `key`, stored within [begin, end] ms;
    empty when the index is off."""
    if consume.index is None:
        return QueryMessageResult()
    readable = consume.reput.reader.durable_offset()
    return await query_messages(
        consume.index,
        consume.files,
        readable,
        max_message_size,
        topic=topic,
        key=key,
        max_num=max_num,
        begin=begin,
        end=end,
    )


async def view_message(consume: ConsumeService, offset: int, max_message_size: int) -> bytes | None:
    """VIEW_MESSAGE_BY_ID: the bytes of the record starting at `offset` (checked as
    `store.lookup` checks a peer's offset), or None."""
    readable = consume.reput.reader.durable_offset()
    return await read_raw_record_at(consume.files, offset, readable, max_message_size)
