"""The commit log's append path (RocketMQ `CommitLog.asyncPutMessage` under the put lock and
`DefaultAppendMessageCallback.doAppend`).

Owns appending encoded records to the last segment, the END_OF_FILE blank rule with one roll and
one retry, patching QUEUEOFFSET / PHYSICALOFFSET / STORETIMESTAMP, and the topic-queue table.
Only the store's single writer task calls `put`; nothing here takes a lock.
"""

from __future__ import annotations

from typing import NamedTuple

from store.allocate import AllocateMappedFileService
from store.encode import EncodedBatch
from store.layout import (
    BLANK_MAGIC_CODE,
    BLANK_RECORD_HEADER,
    END_FILE_MIN_BLANK_LENGTH,
    INT64,
    QUEUE_AND_PHYSICAL_OFFSET,
    QUEUEOFFSET_POS,
)
from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue
from store.status import AppendMessageStatus, PutMessageStatus


class Appended(NamedTuple):
    """Where the writer put a batch: first record's offset, first queue offset, store time."""

    wrote_offset: int
    logics_offset: int
    store_timestamp: int


class DefaultAppendMessageCallback:
    """Copies an encoded batch into a segment, or writes the BLANK record when it does not fit."""

    __slots__ = ("topic_queue_table",)

    def __init__(self, topic_queue_table: dict[str, int]) -> None:
        self.topic_queue_table = topic_queue_table

    def do_append(
        self, mapped_file: MappedFile, batch: EncodedBatch, now_ms: int
    ) -> Appended | AppendMessageStatus:
        target = mapped_file.target()
        position = mapped_file.wrote_position
        max_blank = mapped_file.file_size - position
        total = len(batch.data)
        if total + END_FILE_MIN_BLANK_LENGTH > max_blank:
            if max_blank >= END_FILE_MIN_BLANK_LENGTH:
                BLANK_RECORD_HEADER.pack_into(target, position, max_blank, BLANK_MAGIC_CODE)
            mapped_file.wrote_position = mapped_file.file_size
            return AppendMessageStatus.END_OF_FILE
        table = self.topic_queue_table
        key = batch.topic_queue_key
        queue_offset = table.setdefault(key, 0) if batch.enters_consume_queue else 0
        wrote_offset = mapped_file.file_from_offset + position
        target[position : position + total] = batch.data
        for index, (start, timestamp_pos) in enumerate(batch.records):
            QUEUE_AND_PHYSICAL_OFFSET.pack_into(
                target,
                position + start + QUEUEOFFSET_POS,
                queue_offset + index,
                wrote_offset + start,
            )
            INT64.pack_into(target, position + timestamp_pos, now_ms)
        mapped_file.wrote_position = position + total
        mapped_file.store_timestamp = now_ms
        if batch.enters_consume_queue:
            table[key] = queue_offset + len(batch.records)
        else:
            table.setdefault(key, 0)
        return Appended(wrote_offset, queue_offset, now_ms)


class CommitLog:
    """Segments plus the append callback; `put` is the whole in-lock part of a put."""

    def __init__(
        self, mapped_file_queue: MappedFileQueue, allocator: AllocateMappedFileService
    ) -> None:
        self.mapped_file_queue = mapped_file_queue
        self.allocator = allocator
        self.topic_queue_table: dict[str, int] = {}
        self.append_callback = DefaultAppendMessageCallback(self.topic_queue_table)
        #: where the last record appended starts (-1: none yet); a clean stop records it
        self.last_record_offset = -1

    def recovered(
        self, table: dict[str, int], last_record: int, queue_ends: dict[str, int]
    ) -> None:
        """Go on from recovery's topic-queue table and last record; a queue whose records
        retention deleted goes on from its consume queue's end (`queue_ends`)."""
        own = self.topic_queue_table
        own.clear()
        own.update(table)
        for key, end in queue_ends.items():
            if own.get(key, 0) < end:
                own[key] = end
        self.last_record_offset = last_record

    def try_put(self, batch: EncodedBatch, now_ms: int) -> Appended | None:
        """`put` without a coroutine when the current segment has room for `batch` (the
        common case); None when it must go through `put` (a roll, a refusal)."""
        mapped_file = self.mapped_file_queue.last_mapped_file
        if (
            mapped_file is None
            or len(batch.data) + END_FILE_MIN_BLANK_LENGTH
            > mapped_file.file_size - mapped_file.wrote_position
        ):
            return None
        result = self.append_callback.do_append(mapped_file, batch, now_ms)
        if not isinstance(result, Appended):
            return None  # not reached: the room was checked; `put` says what went wrong
        self.last_record_offset = result.wrote_offset + batch.records[-1][0]
        return result

    async def put(self, batch: EncodedBatch, now_ms: int) -> Appended | PutMessageStatus:
        """Append `batch`, rolling to a new segment when needed. Failures are statuses."""
        if len(batch.data) + END_FILE_MIN_BLANK_LENGTH > self.mapped_file_queue.mapped_file_size:
            return PutMessageStatus.MESSAGE_ILLEGAL
        mapped_file = self.mapped_file_queue.last_mapped_file
        if mapped_file is None or mapped_file.is_full():
            mapped_file = await self._roll()
            if mapped_file is None:
                return PutMessageStatus.CREATE_MAPPED_FILE_FAILED
        result = self.append_callback.do_append(mapped_file, batch, now_ms)
        if result is AppendMessageStatus.END_OF_FILE:
            mapped_file = await self._roll()
            if mapped_file is None:
                return PutMessageStatus.CREATE_MAPPED_FILE_FAILED
            result = self.append_callback.do_append(mapped_file, batch, now_ms)
        if isinstance(result, AppendMessageStatus):
            return PutMessageStatus.UNKNOWN_ERROR
        self.last_record_offset = result.wrote_offset + batch.records[-1][0]
        return result

    async def _roll(self) -> MappedFile | None:
        queue = self.mapped_file_queue
        mapped_file = await self.allocator.get(queue.next_file_offset())
        if mapped_file is not None:
            queue.mapped_files.append(mapped_file)
        return mapped_file
