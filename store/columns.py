"""Finding records in a segment and decoding a run of them column by column.

Owns the one decoder of stored records that every reader uses: `walk` hops record headers
(TOTALSIZE and MAGICCODE, by `decode.record_step`'s rules) and returns where the records lie;
`decode_columns` validates a run of them (`decode.locate_record`'s rules plus the record's own
offset in PHYSICALOFFSET) and returns one column per field (`store.record_columns`).
`CommitLogReader.iter_records` turns those columns into `CommitLogRecord`s; the Spark source
turns them into Arrow arrays.

`decode_columns` has two paths with the same results: pure Python (the store's own) and a
vectorised one taken when numpy can be imported and the run shares one host layout. numpy is
imported on first use only, so the store itself never needs it. The numpy path checks the same
rules; when any record of the run fails them it hands the run to the pure path, which raises
the same error at the same record.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from store.decode import RecordFormatError, locate_record, record_step
from store.layout import (
    FIELD_BODY_CRC,
    FIELD_BORN_HOST,
    FIELD_BORN_TIMESTAMP,
    FIELD_FLAG,
    FIELD_PHYSICAL_OFFSET,
    FIELD_PREPARED_TRANSACTION_OFFSET,
    FIELD_QUEUE_ID,
    FIELD_QUEUE_OFFSET,
    FIELD_RECONSUME_TIMES,
    FIELD_STORE_HOST,
    FIELD_STORE_TIMESTAMP,
    FIELD_SYS_FLAG,
    FIELD_TOTAL_SIZE,
    HEADER_FIELDS,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    SIZE_MAGIC,
    Buffer,
)
from store.record_columns import Packed, RecordColumns


@dataclass(frozen=True, slots=True)
class Walk:
    """Records found by `walk`: segment positions and sizes, where the walk stopped and why.

    `ended`: a BLANK closed the segment (the next record is at the next segment's base).
    `error`: the header at `next_position` is not a record; the records before it are listed.
    """

    positions: list[int]
    sizes: list[int]
    next_position: int
    ended: bool
    error: RecordFormatError | None = None


def walk(
    buf: Buffer,
    start: int,
    stop: int,
    *,
    base: int = 0,
    limit: int | None = None,
    max_records: int | None = None,
) -> Walk:
    """Hop the record headers of `buf` (a whole segment at physical offset `base`) from `start`
    while a record starts below `stop`; every record must end by `limit` (default: the segment).

    Stops early after `max_records` records, at a BLANK (`ended`), or at a header that is not a
    record (`error`, zeros included: callers stop below the durable offset, where none may be).
    """
    end = len(buf) if limit is None else min(limit, len(buf))
    stop = min(stop, end)
    cap = len(buf) if max_records is None else max_records
    unpack = SIZE_MAGIC.unpack_from
    positions: list[int] = []
    sizes: list[int] = []
    pos = start
    while pos < stop and len(positions) < cap:
        if pos + 8 <= end:
            size, magic = unpack(buf, pos)
            if magic == MESSAGE_MAGIC_CODE and MIN_RECORD_SIZE <= size <= end - pos:
                positions.append(pos)
                sizes.append(size)
                pos += size
                continue
        try:
            size = record_step(buf, pos, base + pos, end)
        except RecordFormatError as exc:
            return Walk(positions, sizes, pos, False, exc)
        if size == 0:
            return Walk(positions, sizes, pos, True)
        positions.append(pos)
        sizes.append(size)
        pos += size
    return Walk(positions, sizes, pos, False)


def decode_columns(
    buf: Buffer,
    positions: Sequence[int],
    *,
    base: int = 0,
    limit: int | None = None,
    include_body: bool = True,
    verify_crc: bool = True,
    topics: frozenset[str] | None = None,
    vectorised: bool | None = None,
) -> RecordColumns:
    """Validate and decode the records at `positions` of `buf` (a segment at physical offset
    `base`), keeping those of `topics` when given. Records end by `limit` (default: the buffer).

    Raises RecordFormatError at the first record that `locate_record` refuses or whose
    PHYSICALOFFSET is not its own offset. A CRC mismatch is reported in `crc_ok`, not raised.
    `vectorised`: None tries numpy for runs of `MIN_VECTORISED_RUN` records or more, True for
    any run, False forces the pure path (results are the same).
    """
    end = len(buf) if limit is None else min(limit, len(buf))
    shortest = 1 if vectorised else MIN_VECTORISED_RUN
    if vectorised is not False and len(positions) >= shortest:
        fast = _fast_path()
        if fast is not None:
            decoded = fast(
                buf,
                positions,
                base=base,
                limit=end,
                include_body=include_body,
                verify_crc=verify_crc,
                topics=topics,
            )
            if decoded is not None:
                return decoded
    return _decode_pure(
        buf,
        positions,
        base=base,
        limit=end,
        include_body=include_body,
        verify_crc=verify_crc,
        topics=topics,
    )


#: shorter runs decode in pure Python when the caller leaves the choice: numpy's per-call costs
#: outweigh it there, and a broker that only sees a few messages at a time never loads numpy
MIN_VECTORISED_RUN: Final = 16


def _fast_path() -> Callable[..., RecordColumns | None] | None:
    try:
        from store.columns_fast import decode
    except ImportError:  # numpy is not installed: the store works without it
        return None
    return decode


def _decode_pure(
    buf: Buffer,
    positions: Sequence[int],
    *,
    base: int,
    limit: int,
    include_body: bool,
    verify_crc: bool,
    topics: frozenset[str] | None,
) -> RecordColumns:
    wanted = None if topics is None else {topic.encode() for topic in topics}
    need_body = include_body or verify_crc
    headers: list[tuple[Any, ...]] = []
    topic_col: list[bytes] = []
    props_col: list[bytes] = []
    bodies: list[bytes] = []
    for pos in positions:
        offset = base + pos
        header, fields, topic_pos, props_pos, props_len = locate_record(buf, pos, offset, limit)
        physical = fields[FIELD_PHYSICAL_OFFSET]
        if physical != offset:
            raise RecordFormatError(offset, f"physical offset field {physical}")
        topic = bytes(buf[topic_pos + 1 : props_pos])
        if wanted is not None and topic not in wanted:
            continue
        headers.append(fields)
        topic_col.append(topic)
        props_col.append(bytes(buf[props_pos + 2 : props_pos + 2 + props_len]))
        if need_body:
            bodies.append(bytes(buf[pos + header.size : topic_pos]))
    cols: list[Sequence[Any]] = list(zip(*headers, strict=True)) or [()] * len(HEADER_FIELDS)
    crc_ok = None
    if verify_crc:
        crc_ok = [
            (zlib.crc32(body) & 0x7FFFFFFF) == stored
            for body, stored in zip(bodies, cols[FIELD_BODY_CRC], strict=True)
        ]
    return RecordColumns(
        physical_offset=cols[FIELD_PHYSICAL_OFFSET],
        total_size=cols[FIELD_TOTAL_SIZE],
        body_crc=cols[FIELD_BODY_CRC],
        queue_id=cols[FIELD_QUEUE_ID],
        flag=cols[FIELD_FLAG],
        queue_offset=cols[FIELD_QUEUE_OFFSET],
        sys_flag=cols[FIELD_SYS_FLAG],
        born_timestamp=cols[FIELD_BORN_TIMESTAMP],
        born_host=Packed.of(list(cols[FIELD_BORN_HOST])),
        store_timestamp=cols[FIELD_STORE_TIMESTAMP],
        store_host=Packed.of(list(cols[FIELD_STORE_HOST])),
        reconsume_times=cols[FIELD_RECONSUME_TIMES],
        prepared_transaction_offset=cols[FIELD_PREPARED_TRANSACTION_OFFSET],
        topic=Packed.of(topic_col),
        properties=Packed.of(props_col),
        body=Packed.of(bodies) if include_body else None,
        crc_ok=crc_ok,
    )
