"""The commit log as replication sees it (RocketMQ 4.9 `CommitLog.getData` on a master and
`CommitLog.appendData` on a slave): read raw bytes from an offset, append raw bytes at exactly
the offset where the log ends.

Knows offsets and segments only: no sockets, no protocol. A slave's appended bytes may end in the
middle of a record (the master cuts its stream into batches regardless of records), so the log
also tracks `whole_end`, the end of the last whole record or segment-end blank: the consume side
follows that, never a record cut short. Only the store's trio thread calls in; a slave's writer
takes no puts, so nothing else appends.

`GroupTransferService` is SYNC_MASTER's wait for a slave (4.9 `CommitLog.handleHA` and
`HAService.GroupTransferService`). A put under SYNC_MASTER that asked to wait (WAIT,
`wait_store_msg_ok`) is answered PUT_OK only once a slave has reported an offset at or past the
put's end; FLUSH_SLAVE_TIMEOUT when none has by the put's deadline (`sync_flush_timeout_ms`
after its append); SLAVE_NOT_AVAILABLE at once when no slave is connected or the best one is
`ha_slave_fallbehind_max` bytes or more behind the put's end. The record stays in the master's
log whatever the answer, as in 4.9. The broker's HA connections tell it how many slaves are
connected and what they reported (`slave_connected`, `slave_disconnected`,
`notify_transfer_some`).
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import structlog
import trio

from store.allocate import AllocateMappedFileService
from store.layout import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, SIZE_MAGIC
from store.mapped_file_queue import MappedFileQueue
from store.put_queue import PutRequest
from store.status import PutMessageStatus

log = structlog.get_logger()

_RECORD_MAGICS = frozenset({MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2})


class ReplicaAppendError(Exception):
    """Bytes that cannot go at the offset they claim; the message says why. Nothing was written."""


class ReplicaLog:
    """`read_from` for a master's HA connections, `append_at` for a slave's HA client."""

    def __init__(
        self,
        queue: MappedFileQueue,
        allocator: AllocateMappedFileService,
        after_append: Callable[[], None],
    ) -> None:
        self.queue = queue
        self.allocator = allocator
        self.after_append = after_append
        #: the end of the last whole record (or blank) at or below the log's end
        self.whole_end = queue.max_offset
        self._unreadable_at = -1
        self._appended = trio.Event()

    def recovered(self) -> None:
        """The log was recovered: it ends with a whole record."""
        self.whole_end = self.queue.max_offset

    def notify_readers(self) -> None:
        """The log grew: wake every `wait_for_data`."""
        event, self._appended = self._appended, trio.Event()
        event.set()

    async def wait_for_data(self, offset: int, timeout_s: float) -> None:
        """Return once the log's readable end is past `offset`, or after `timeout_s`."""
        if self.queue.max_offset > offset:
            return
        with trio.move_on_after(timeout_s):
            await self._appended.wait()

    def read_from(self, offset: int, max_bytes: int) -> bytes | None:
        """The log's bytes from `offset`, up to `max_bytes` and never past the end of its segment
        or what readers may see; b"" when nothing is there yet, None when `offset` is below the
        log's start (retention deleted it) or past its end."""
        queue = self.queue
        if offset > queue.max_offset:
            return None
        if offset == queue.max_offset:
            return b""
        mapped_file = queue.find_mapped_file_by_offset(offset)
        if mapped_file is None or offset < queue.min_offset:
            return None
        position = offset - mapped_file.file_from_offset
        end = min(mapped_file.read_position, position + max_bytes)
        return bytes(mapped_file.mm[position:end]) if end > position else b""

    async def append_at(self, offset: int, data: bytes) -> None:
        """Append `data` where the log ends, which must be `offset`; a segment is started when
        `offset` is where the next one begins (or, in an empty log, any segment start). Raises
        ReplicaAppendError for any other offset, data crossing a segment's end or a segment that
        cannot be created; nothing is written then."""
        if not data:
            return
        queue = self.queue
        size = queue.mapped_file_size
        last = queue.last_mapped_file
        if last is None:
            if offset % size:
                raise ReplicaAppendError(f"an empty log starts at a segment start, not {offset}")
            self.whole_end = offset
        elif offset != queue.max_wrote_offset:
            raise ReplicaAppendError(f"the log ends at {queue.max_wrote_offset}, not {offset}")
        if offset % size + len(data) > size:
            raise ReplicaAppendError(f"{len(data)} bytes at {offset} cross a segment's end")
        if last is None or last.is_full():
            last = await self.allocator.get(offset)
            if last is None:
                raise ReplicaAppendError(f"the segment at {offset} cannot be created")
            queue.mapped_files.append(last)
        position = offset - last.file_from_offset
        last.mm[position : position + len(data)] = data
        last.wrote_position = position + len(data)
        last.committed_position = last.wrote_position
        self._advance_whole_end()
        self.after_append()

    def _advance_whole_end(self) -> None:
        """Walk the record headers from `whole_end` to the written end."""
        queue = self.queue
        end = queue.max_wrote_offset
        offset = self.whole_end
        size = queue.mapped_file_size
        while offset < end:
            mapped_file = queue.find_mapped_file_by_offset(offset)
            if mapped_file is None:
                break
            position = offset - mapped_file.file_from_offset
            if size - position < SIZE_MAGIC.size:  # too short for a blank: the segment ends
                total = size - position
            elif position + SIZE_MAGIC.size > mapped_file.wrote_position:
                break
            else:
                total, magic = SIZE_MAGIC.unpack_from(mapped_file.mm, position)
                if magic == BLANK_MAGIC_CODE:
                    total = size - position
                elif magic not in _RECORD_MAGICS or total <= 0 or position + total > size:
                    if self._unreadable_at != offset:  # one event, not one per append
                        self._unreadable_at = offset
                        log.error("replica_record_unreadable", offset=offset, size=total)
                    break
            if position + total > mapped_file.wrote_position:
                break
            offset += total
        self.whole_end = offset


class GroupTransferService:
    def __init__(self, fallbehind_max: int) -> None:
        self.fallbehind_max = fallbehind_max
        #: the furthest offset any slave has reported (4.9's push2SlaveMaxOffset)
        self.push_to_slave_max_offset = 0
        self.connections = 0
        #: puts waiting for a slave, in end-offset order
        self.pending: collections.deque[PutRequest] = collections.deque()
        self._added = trio.Event()

    def slave_ok(self, end_offset: int) -> bool:
        """A slave is connected and less than `fallbehind_max` bytes behind `end_offset`."""
        return (
            self.connections > 0
            and end_offset - self.push_to_slave_max_offset < self.fallbehind_max
        )

    def put_request(self, request: PutRequest) -> None:
        """Wait for a slave to pass `request.end_offset`, or answer at once."""
        if not self.slave_ok(request.end_offset):
            request.complete(PutMessageStatus.SLAVE_NOT_AVAILABLE)
        elif request.end_offset <= self.push_to_slave_max_offset:
            request.complete(PutMessageStatus.PUT_OK)
        else:
            self.pending.append(request)
            self._added.set()

    def slave_connected(self) -> None:
        self.connections += 1

    def slave_disconnected(self) -> None:
        self.connections -= 1

    def notify_transfer_some(self, offset: int) -> None:
        """A slave reported `offset`: every put ending at or below it is answered PUT_OK."""
        if offset <= self.push_to_slave_max_offset:
            return
        self.push_to_slave_max_offset = offset
        pending = self.pending
        while pending and pending[0].end_offset <= offset:
            pending.popleft().complete(PutMessageStatus.PUT_OK)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Answer FLUSH_SLAVE_TIMEOUT to every put still waiting at its deadline."""
        task_status.started()
        pending = self.pending
        while True:
            if not pending:
                self._added = trio.Event()
                await self._added.wait()
                continue
            await trio.sleep_until(pending[0].deadline)
            now = trio.current_time()
            while pending and pending[0].deadline <= now:
                pending.popleft().complete(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)

    def shutdown(self) -> None:
        """The store closes: no slave will be heard from; every waiting put times out."""
        while self.pending:
            self.pending.popleft().complete(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
