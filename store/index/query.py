"""QUERY_MESSAGE and VIEW_MESSAGE_BY_ID on the store: record bytes by key and by offset.

A key's offsets come from the index (`IndexService.query_offsets`, in a worker thread); each is
then read as `store.lookup` reads an offset a peer names: checked against the log's bounds and
the record's own header before anything is copied, a large record read by `pread` in a worker
thread while its segment is held. The answer is the records' bytes as stored, in commit-log
order (4.9 sorts them too). Unlike 4.9, whose clients drop what does not match, a record is
returned only when its topic is the one asked for and it carries the key: two keys with one
hash ("Aa" and "BB") do not answer for each other. And unlike 4.9, which sends up to 64 records
whatever their size, the answer stops growing once it holds `QUERY_BODY_MAX_BYTES` (it always
holds the first match), so one query cannot make the broker copy 64 large records at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import trio

from store.decode import RecordFormatError, decode_record
from store.index.index_file import index_keys
from store.index.service import IndexService
from store.lookup import LOOP_READ_MAX_BYTES, read_held, record_size_at

if TYPE_CHECKING:
    from store.mapped_file_queue import MappedFileQueue

#: an answer stops growing past this many bytes of records
QUERY_BODY_MAX_BYTES: Final = 8 << 20


@dataclass(slots=True)
class QueryMessageResult:
    """The matching records' bytes and where the index stood (the response header's fields)."""

    messages: list[bytes] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0

    @property
    def body(self) -> bytes:
        return b"".join(self.messages)


async def read_raw_record_at(
    files: MappedFileQueue, offset: int, readable_end: int, max_message_size: int
) -> bytes | None:
    """The bytes of the record starting at `offset`, or None when none does (the rules of
    `store.lookup`: bounds, magic, size, the record's own offset field)."""
    if not files.min_offset <= offset < readable_end:
        return None
    mapped = files.find_mapped_file_by_offset(offset)
    if mapped is None:
        return None
    try:
        size = record_size_at(mapped, offset, readable_end, max_message_size)
    except (RecordFormatError, ValueError, IndexError):
        return None
    pos = offset - mapped.file_from_offset
    if size <= LOOP_READ_MAX_BYTES:
        return bytes(mapped.mm[pos : pos + size])
    return await read_held(mapped, pos, size)


def _carries(data: bytes, offset: int, topic: str, key: str) -> bool:
    try:
        rec = decode_record(data, 0, base_offset=offset, include_body=False, verify_crc=False)
    except (RecordFormatError, ValueError, IndexError):
        return False
    return rec.topic == topic and key in index_keys(rec.properties)


async def query_messages(
    index: IndexService,
    files: MappedFileQueue,
    readable_end: int,
    max_message_size: int,
    *,
    topic: str,
    key: str,
    max_num: int,
    begin: int,
    end: int,
) -> QueryMessageResult:
    """The records of `topic` carrying `key` stored within [begin, end] ms, at most `max_num`
    (and at most 4.9's `maxMsgsNumBatch`)."""
    found = await trio.to_thread.run_sync(index.query_offsets, topic, key, max_num, begin, end)
    result = QueryMessageResult(
        index_last_update_timestamp=found.index_last_update_timestamp,
        index_last_update_phyoffset=found.index_last_update_phyoffset,
    )
    total = 0
    for offset in sorted(set(found.offsets)):
        if total >= QUERY_BODY_MAX_BYTES:
            break
        data = await read_raw_record_at(files, offset, readable_end, max_message_size)
        if data is not None and _carries(data, offset, topic, key):
            result.messages.append(data)
            total += len(data)
    return result
