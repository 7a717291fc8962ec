"""Reading messages by topic, queue id and logical offset: `get_message` and its result.

Owns the lookup a pull makes: consume-queue units from a logical offset, the filter (for a TAG
subscription the tags code first, then the exact TAGS of the record; for a SQL92 one the
record's properties, which the tags code cannot decide; as RocketMQ's ExpressionMessageFilter)
and the stored record bytes, returned exactly as stored so clients decode them.
Units only exist as far as the dispatcher went: the durable offset under SYNC_FLUSH, so nothing
served here can be taken back by a crash; the written offset under ASYNC_FLUSH, as RocketMQ.
Mirrors DefaultMessageStore.getMessage (4.9).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Final

from store.consume_queue import ConsumeQueue, CqUnit
from store.decode import RecordFormatError, decode_record, locate_record
from store.dispatch import ConsumeQueueTable
from store.message import java_string_hash, tags_of
from store.sql_filter import SqlExpression

MAX_TRANSFER_BYTES: Final = 256 * 1024  # maxTransferBytesOnMessageInMemory
MAX_SCAN_UNITS: Final = 800  # units looked at per pull when the filter skips many

# Physical offset -> (record bytes) or None when the segment is gone.
ReadBytes = Callable[[int, int], bytes | None]


class GetMessageStatus(enum.Enum):
    FOUND = enum.auto()
    NO_MATCHED_MESSAGE = enum.auto()
    MESSAGE_WAS_REMOVING = enum.auto()
    OFFSET_FOUND_NULL = enum.auto()
    OFFSET_OVERFLOW_BADLY = enum.auto()
    OFFSET_OVERFLOW_ONE = enum.auto()
    OFFSET_TOO_SMALL = enum.auto()
    NO_MATCHED_LOGIC_QUEUE = enum.auto()
    NO_MESSAGE_IN_QUEUE = enum.auto()


@dataclass(frozen=True, slots=True)
class TagFilter:
    """A subscription's filter: a TAG one (`tags` None, or "*", matches everything) or, with
    `sql`, a SQL92 selector over each record's properties."""

    tags: frozenset[str] | None = None
    codes: frozenset[int] = field(default=frozenset())
    sql: SqlExpression | None = None

    @classmethod
    def parse(cls, expression: str | None) -> TagFilter:
        """`"TagA || TagB"` as the clients send it; empty or `*` means every message."""
        if not expression or expression.strip() in ("", "*"):
            return cls()
        tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
        return cls(tags, frozenset(java_string_hash(t) for t in tags))

    @classmethod
    def of(cls, tags: Collection[str] | None) -> TagFilter:
        if not tags:
            return cls()
        return cls(frozenset(tags), frozenset(java_string_hash(t) for t in tags))

    def matches_code(self, code: int) -> bool:
        return self.tags is None or code in self.codes

    def matches_tags(self, tags: str | None) -> bool:
        return self.tags is None or (tags is not None and tags in self.tags)

    @property
    def reads_record(self) -> bool:
        """Whether a record must be decoded to decide (`matches_record`)."""
        return self.tags is not None or self.sql is not None

    def matches_record(self, data: bytes) -> bool:
        """The record's TAGS are subscribed, or its properties pass the selector; a record
        that does not decode matches neither."""
        if self.sql is None:
            return self.matches_tags(_record_tags(data))
        properties = _record_properties(data)
        return properties is not None and self.sql.matches(properties)


@dataclass(frozen=True, slots=True)
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[bytes] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    #: a unit larger than the caller reads on the event loop, not read yet (`with_large`)
    large: CqUnit | None = None
    #: where the last record returned (or `large`) starts in the commit log; -1: none
    max_physical_offset_pulling: int = -1

    @property
    def message_count(self) -> int:
        return len(self.messages)

    @property
    def buffer_total_size(self) -> int:
        return sum(len(m) for m in self.messages)


def _out_of_range(cq: ConsumeQueue | None, offset: int) -> GetMessageResult | None:
    if cq is None:
        return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    lo, hi = cq.min_logic_offset, cq.max_logic_offset
    if hi == 0:
        return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
    if offset < lo:
        return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, lo, lo, hi)
    if offset == hi:
        return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
    if offset > hi:
        return GetMessageResult(
            GetMessageStatus.OFFSET_OVERFLOW_BADLY, 0 if lo == 0 else hi, lo, hi
        )
    return None


def get_message(  # noqa: PLR0917 - the queue's coordinates, as MessageStore.getMessage
    table: ConsumeQueueTable,
    read_bytes: ReadBytes,
    commit_log_min: int,
    topic: str,
    queue_id: int,
    offset: int,
    *,
    max_count: int,
    tag_filter: TagFilter | None = None,
    loop_read_max: int | None = None,
) -> GetMessageResult:
    """Up to `max_count` records of the queue from logical `offset` that pass `tag_filter`.

    With `loop_read_max`, no record larger than that is read here: the batch ends before it,
    or, when it comes first, the result names it in `large` for the caller to read elsewhere
    (a worker thread) and finish with `with_large`.
    """
    cq = table.existing(topic, queue_id)
    early = _out_of_range(cq, offset)
    if early is not None or cq is None:
        assert early is not None
        return early
    wanted = tag_filter or TagFilter()
    messages: list[bytes] = []
    offsets: list[int] = []
    status = GetMessageStatus.NO_MATCHED_MESSAGE
    next_offset = offset
    size = 0
    large: CqUnit | None = None
    last_physical = -1
    while len(messages) < max_count and next_offset - offset < MAX_SCAN_UNITS:
        units = cq.read_units(next_offset, MAX_SCAN_UNITS - (next_offset - offset))
        if not units:
            break
        for unit in units:
            if len(messages) >= max_count or (messages and size + unit.size > MAX_TRANSFER_BYTES):
                break
            next_offset = unit.queue_offset + 1
            if unit.physical_offset < commit_log_min:
                status = GetMessageStatus.MESSAGE_WAS_REMOVING
                continue
            if not wanted.matches_code(unit.tags_code):
                continue
            if loop_read_max is not None and unit.size > loop_read_max:
                if messages:
                    next_offset = unit.queue_offset  # the next pull starts with it
                else:
                    large = unit
                break
            data = read_bytes(unit.physical_offset, unit.size)
            if data is None:
                status = GetMessageStatus.OFFSET_FOUND_NULL
                continue
            if wanted.reads_record and not wanted.matches_record(data):
                continue
            messages.append(data)
            offsets.append(unit.queue_offset)
            size += unit.size
            last_physical = unit.physical_offset
        else:
            continue
        break
    if messages or large:
        status = GetMessageStatus.FOUND
    if large is not None:
        last_physical = large.physical_offset
    lo, hi = cq.min_logic_offset, cq.max_logic_offset
    return GetMessageResult(status, next_offset, lo, hi, messages, offsets, large, last_physical)


def with_large(
    result: GetMessageResult, data: bytes | None, tag_filter: TagFilter | None
) -> GetMessageResult:
    """`result` once its `large` unit was read as `data` (None: its segment is gone)."""
    unit = result.large
    assert unit is not None
    wanted = tag_filter or TagFilter()
    if data is None:
        status = GetMessageStatus.OFFSET_FOUND_NULL
    elif wanted.reads_record and not wanted.matches_record(data):
        status = GetMessageStatus.NO_MATCHED_MESSAGE
    else:
        return dataclasses.replace(
            result, messages=[data], queue_offsets=[unit.queue_offset], large=None
        )
    return dataclasses.replace(result, status=status, large=None)


def _record_tags(data: bytes) -> str | None:
    try:
        record = decode_record(data, 0, include_body=False, verify_crc=False)
    except RecordFormatError:
        return None
    return tags_of(record.properties)


def _record_properties(data: bytes) -> dict[str, str] | None:
    """The record's properties by name (user and system ones: TAGS, KEYS, ...), as 4.9's
    MessageDecoder.string2messageProperties splits them (a pair needs a name and a value, split
    at its first separator); None when the record does not decode."""
    try:
        _, _, _, start, length = locate_record(data, 0, 0, len(data))
    except RecordFormatError:
        return None
    text = data[start + 2 : start + 2 + length].decode(errors="replace")
    properties: dict[str, str] = {}
    for pair in text.split("\x02"):
        name, _, value = pair.partition("\x01")
        if name and value:
            properties[name] = value
    return properties
