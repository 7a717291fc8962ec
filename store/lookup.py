"""One record read by the commit-log offset a peer names (a consumer's send back).

The offset is the peer's word, not the log's: nothing past the record's header is read until the
offset is known to start a record. It must lie in `[first offset, readable end)`, and the bytes
there must hold the message magic, a TOTALSIZE between the smallest record and
`max_message_size` plus the record overhead (what the put path lets through) that ends inside
both its segment and the readable range, and a PHYSICALOFFSET field equal to the offset itself:
a body crafted to look like a header does not carry its own position there. RocketMQ 4.9's
`lookMessageByOffset` trusts the size it finds at the offset instead.

A record of up to `LOOP_READ_MAX_BYTES` is decoded from the mapping on the event loop (a pull
copies that much); a larger one is read with `pread` and decoded in a worker thread while its
segment is held (`MappedFile.hold`), so neither the copy nor a page fault on a cold page stops
the loop. Knows segments and bytes only; the caller owns the bounds it passes.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

import trio

from store.decode import CommitLogRecord, RecordFormatError, decode_record
from store.layout import (
    INT64,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    PHYSICALOFFSET_POS,
    RECORD_OVERHEAD_BYTES,
    SIZE_MAGIC,
)

if TYPE_CHECKING:
    from store.mapped_file import MappedFile
    from store.mapped_file_queue import MappedFileQueue

#: records up to this size are decoded on the event loop; larger ones in a worker thread
LOOP_READ_MAX_BYTES: Final = 64 * 1024
#: the bytes of a record that say whether it starts where it was asked for
_START_BYTES: Final = PHYSICALOFFSET_POS + INT64.size


def record_size_at(
    mapped: MappedFile, offset: int, readable_end: int, max_message_size: int
) -> int:
    """The TOTALSIZE of the record starting at commit-log `offset` in `mapped`, checked as the
    module says. Raises RecordFormatError naming the first rule the bytes break."""
    pos = offset - mapped.file_from_offset
    if not 0 <= pos <= mapped.file_size - _START_BYTES or offset + _START_BYTES > readable_end:
        raise RecordFormatError(offset, "no room for a record header")
    size, magic = SIZE_MAGIC.unpack_from(mapped.mm, pos)
    if magic != MESSAGE_MAGIC_CODE:
        raise RecordFormatError(offset, f"bad magic code {magic & 0xFFFFFFFF:#010x}")
    largest = min(
        max_message_size + RECORD_OVERHEAD_BYTES, mapped.file_size - pos, readable_end - offset
    )
    if not MIN_RECORD_SIZE <= size <= largest:
        raise RecordFormatError(offset, f"total size {size} out of bounds")
    physical = INT64.unpack_from(mapped.mm, pos + PHYSICALOFFSET_POS)[0]
    if physical != offset:
        raise RecordFormatError(offset, f"physical offset field {physical}")
    return int(size)


async def read_record_at(
    files: MappedFileQueue, offset: int, readable_end: int, max_message_size: int
) -> CommitLogRecord | None:
    """The record starting at `offset`, or None when none does (any rule broken, the segment
    gone, or the record itself malformed). `readable_end` bounds what may be read: what the
    consume side has been allowed to follow. A large record's read runs in a worker thread and
    is not abandoned on cancellation (it is bounded by `max_message_size`)."""
    if not files.min_offset <= offset < readable_end:
        return None
    mapped = files.find_mapped_file_by_offset(offset)
    if mapped is None:
        return None
    try:
        size = record_size_at(mapped, offset, readable_end, max_message_size)
        pos = offset - mapped.file_from_offset
        if size <= LOOP_READ_MAX_BYTES:
            return decode_record(
                mapped.mm, pos, base_offset=offset - pos, limit=pos + size, verify_crc=False
            )
    except (RecordFormatError, ValueError, IndexError):
        return None
    data = await read_held(mapped, pos, size)
    if data is None:
        return None
    try:
        return decode_record(data, 0, base_offset=offset, verify_crc=False)
    except (RecordFormatError, ValueError, IndexError):
        return None


async def read_held(mapped: MappedFile, pos: int, size: int) -> bytes | None:
    """`size` bytes at `pos` of the segment, copied by `pread` in a worker thread while the
    segment is held; None when retention is deleting it or the bytes are not all there."""
    if pos + size > mapped.file_size or not mapped.hold():
        return None
    try:
        return await trio.to_thread.run_sync(pread_exact, mapped.fd, size, pos)
    finally:
        mapped.release()


def pread_exact(fd: int, size: int, pos: int) -> bytes | None:
    """`pread` releases the GIL while it copies (and while a cold page is read from disk)."""
    try:
        data = os.pread(fd, size, pos)
    except OSError:
        return None
    return data if len(data) == size else None
