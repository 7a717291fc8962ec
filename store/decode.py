"""The readers' decoder of commit-log records (RocketMQ 4.9 `CommitLog.checkMessageAndReturnSize`,
`MessageDecoder`): validate the records `store.layout` describes and turn them into
`CommitLogRecord`s.

Owns bytes only: no files, no clock. `locate_record` is the one definition of a well-formed
record and `build_record` the one place a `CommitLogRecord` is made; the column decoder
(`store.columns`) keeps to both.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from dataclasses import dataclass, fields
from inspect import signature
from typing import Any

from store.layout import (
    BLANK_MAGIC_CODE,
    FIELD_BODY_CRC,
    FIELD_BODY_LENGTH,
    FIELD_BORN_HOST,
    FIELD_BORN_TIMESTAMP,
    FIELD_FLAG,
    FIELD_MAGIC,
    FIELD_PHYSICAL_OFFSET,
    FIELD_PREPARED_TRANSACTION_OFFSET,
    FIELD_QUEUE_ID,
    FIELD_QUEUE_OFFSET,
    FIELD_RECONSUME_TIMES,
    FIELD_STORE_HOST,
    FIELD_STORE_TIMESTAMP,
    FIELD_SYS_FLAG,
    FIELD_TOTAL_SIZE,
    HEADER_STRUCTS,
    HEADER_V4,
    INT32,
    INT64,
    MAGIC_BYTES,
    MAGIC_POS,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    PHYSICALOFFSET_POS,
    SIZE_MAGIC,
    SYSFLAG_POS,
    Buffer,
    cal_msg_length,
)
from store.message import BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG, decode_host


class RecordFormatError(Exception):
    """The bytes at `offset` are not a valid record; `reason` says which check failed."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"invalid record at physical offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


@dataclass(frozen=True, slots=True)
class CommitLogRecord:
    """One decoded record. `crc_ok` is None when the CRC was not checked; `body` None if skipped.

    The fixed fields in header order, then the variable ones, as in `RecordColumns`:
    `build_record` passes them by position.
    """

    physical_offset: int
    total_size: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    topic: str
    properties: str
    body: bytes | None
    crc_ok: bool | None


def build_record(  # noqa: PLR0917 (positional: a row of RecordColumns maps onto it)
    physical_offset: int,
    total_size: int,
    body_crc: int,
    queue_id: int,
    flag: int,
    queue_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_transaction_offset: int,
    topic: bytes,
    properties: bytes,
    body: bytes | None,
    crc_ok: bool | None,
) -> CommitLogRecord:
    """The one place a `CommitLogRecord` is made: from a record's stored fields, in the order of
    its fields. Hosts are the raw host fields; topic and properties raw UTF-8, decoded with bad
    bytes replaced. (By position: 17 keywords would add a tenth to the cost of `decode_record`.)"""
    return CommitLogRecord(
        physical_offset,
        total_size,
        body_crc,
        queue_id,
        flag,
        queue_offset,
        sys_flag,
        born_timestamp,
        decode_host(born_host),
        store_timestamp,
        decode_host(store_host),
        reconsume_times,
        prepared_transaction_offset,
        topic.decode(errors="replace"),
        properties.decode(errors="replace"),
        body,
        crc_ok,
    )


assert tuple(signature(build_record).parameters) == tuple(f.name for f in fields(CommitLogRecord))


def record_step(buf: Buffer, pos: int, offset: int, limit: int) -> int:
    """Size of the record at `pos` judged by TOTALSIZE and MAGICCODE alone (the header walk).

    > 0: a MESSAGE whose size is plausible and that ends by `limit`; 0: a BLANK that ends the
    segment (`buf` is the whole segment). Anything else, zeros included, raises RecordFormatError
    naming `offset` (the physical offset of `pos`).
    """
    if pos < 0 or pos + 8 > len(buf):
        raise RecordFormatError(offset, "no room for a header")
    total, magic = SIZE_MAGIC.unpack_from(buf, pos)
    if magic == MESSAGE_MAGIC_CODE:
        if MIN_RECORD_SIZE <= total <= limit - pos:
            return int(total)
        raise RecordFormatError(offset, f"total size {total} out of bounds")
    if magic == BLANK_MAGIC_CODE:
        if total == len(buf) - pos:
            return 0
        raise RecordFormatError(offset, f"blank size {total} does not reach the end")
    if magic == 0:
        raise RecordFormatError(offset, "no magic code")
    raise RecordFormatError(offset, f"bad magic code {magic & 0xFFFFFFFF:#010x}")


def locate_record(
    buf: Buffer, pos: int, offset: int, limit: int
) -> tuple[struct.Struct, tuple[Any, ...], int, int, int]:
    """Validate the MESSAGE record at `pos`: (header struct, header fields, topic position,
    properties position, properties length). The one definition of a well-formed record.

    Checks magic, TOTALSIZE against the bytes up to `limit` and against `cal_msg_length` of the
    field lengths. Raises RecordFormatError naming `offset`; never checks the body CRC.
    """
    if pos < 0 or pos + HEADER_V4.size > limit:
        raise RecordFormatError(offset, "header runs past the end")
    sys_flag = INT32.unpack_from(buf, pos + SYSFLAG_POS)[0]
    header = HEADER_STRUCTS[
        (bool(sys_flag & BORNHOST_V6_FLAG), bool(sys_flag & STOREHOSTADDRESS_V6_FLAG))
    ]
    if pos + header.size > limit:
        raise RecordFormatError(offset, "header runs past the end")
    f = header.unpack_from(buf, pos)
    total, magic = f[FIELD_TOTAL_SIZE], f[FIELD_MAGIC]
    if magic != MESSAGE_MAGIC_CODE:
        raise RecordFormatError(offset, f"bad magic code {magic & 0xFFFFFFFF:#010x}")
    if total < header.size + 3 or pos + total > limit:
        raise RecordFormatError(offset, f"total size {total} out of bounds")
    body_len = f[FIELD_BODY_LENGTH]
    topic_pos = pos + header.size + body_len
    if body_len < 0 or topic_pos + 3 > pos + total:
        raise RecordFormatError(offset, f"body length {body_len} out of bounds")
    topic_len = buf[topic_pos]
    props_pos = topic_pos + 1 + topic_len
    props_len = int.from_bytes(buf[props_pos : props_pos + 2], "big")
    if cal_msg_length(sys_flag, body_len, topic_len, props_len) != total:
        raise RecordFormatError(offset, f"total size {total} does not match the field lengths")
    return header, f, topic_pos, props_pos, props_len


def decode_record(
    buf: Buffer,
    pos: int,
    *,
    base_offset: int = 0,
    include_body: bool = True,
    verify_crc: bool = True,
    limit: int | None = None,
) -> CommitLogRecord:
    """Decode the MESSAGE record at `pos` of `buf` (a segment starting at `base_offset`).

    Validation is `locate_record`'s. A CRC mismatch is reported in `crc_ok`, not raised.
    """
    header, f, topic_pos, props_pos, props_len = locate_record(
        buf, pos, base_offset + pos, len(buf) if limit is None else limit
    )
    body = bytes(buf[pos + header.size : topic_pos]) if include_body or verify_crc else None
    crc = f[FIELD_BODY_CRC]
    return build_record(
        f[FIELD_PHYSICAL_OFFSET],
        f[FIELD_TOTAL_SIZE],
        crc,
        f[FIELD_QUEUE_ID],
        f[FIELD_FLAG],
        f[FIELD_QUEUE_OFFSET],
        f[FIELD_SYS_FLAG],
        f[FIELD_BORN_TIMESTAMP],
        f[FIELD_BORN_HOST],
        f[FIELD_STORE_TIMESTAMP],
        f[FIELD_STORE_HOST],
        f[FIELD_RECONSUME_TIMES],
        f[FIELD_PREPARED_TRANSACTION_OFFSET],
        bytes(buf[topic_pos + 1 : props_pos]),
        bytes(buf[props_pos + 2 : props_pos + 2 + props_len]),
        body if include_body else None,
        (zlib.crc32(body or b"") & 0x7FFFFFFF) == crc if verify_crc else None,
    )


def decode_copied_records(data: Buffer) -> list[CommitLogRecord]:
    """Whole records copied out of the commit log and laid end to end (a pull's body, a read of
    the consume queue's units), in order. Each carries its own commit-log offset, which is taken
    as where it stands. Raises RecordFormatError for bytes that are not such records."""
    records = []
    position = 0
    while position < len(data):
        physical = INT64.unpack_from(data, position + PHYSICALOFFSET_POS)[0]
        record = decode_record(data, position, base_offset=physical - position)
        records.append(record)
        position += record.total_size
    return records


@dataclass(frozen=True, slots=True)
class RecordCheck:
    """RocketMQ `DispatchRequest` in short: size 0 = BLANK (end of segment); not ok = stop."""

    size: int
    ok: bool
    topic_queue_key: str = ""
    queue_offset: int = 0
    sys_flag: int = 0
    store_timestamp: int = 0
    reason: str = ""


def check_message_and_return_size(
    buf: Buffer, pos: int, expected_offset: int, check_crc: bool
) -> RecordCheck:
    """Validate the record at `pos` (RocketMQ `checkMessageAndReturnSize`, plus the rule that
    PHYSICALOFFSET equals the record's own offset `expected_offset`). Never raises."""
    try:
        if record_step(buf, pos, expected_offset, len(buf)) == 0:
            return RecordCheck(0, True)
    except RecordFormatError as exc:
        return RecordCheck(-1, False, reason=exc.reason)
    try:
        rec = decode_record(
            buf, pos, base_offset=expected_offset - pos, include_body=False, verify_crc=check_crc
        )
    except (RecordFormatError, ValueError, IndexError) as error:
        return RecordCheck(-1, False, reason=str(error))
    if rec.physical_offset != expected_offset:
        return RecordCheck(-1, False, reason=f"physical offset field {rec.physical_offset}")
    if rec.crc_ok is False:
        return RecordCheck(-1, False, reason="body CRC mismatch")
    if "\x00" in rec.properties or "\x00" in rec.topic:
        # The CRC covers the body only; zeroed pages of a torn write show up as NULs, which
        # the put path never stores in these fields.
        return RecordCheck(-1, False, reason="NUL in topic or properties")
    return RecordCheck(
        rec.total_size,
        True,
        topic_queue_key=f"{rec.topic}-{rec.queue_id}",
        queue_offset=rec.queue_offset,
        sys_flag=rec.sys_flag,
        store_timestamp=rec.store_timestamp,
    )


def find_record_boundary(
    buf: bytes | bytearray | mmap.mmap,
    pos: int,
    base_offset: int,
    limit: int,
    *,
    verify_crc: bool = True,
) -> int | None:
    """First position >= `pos` of `buf` (a segment at `base_offset`) holding a valid record.

    A candidate needs the magic code, its own physical offset in PHYSICALOFFSET, consistent sizes
    and (when `verify_crc`) a matching body CRC; records end before `limit`. None if none is found.
    """
    while True:
        found = buf.find(MAGIC_BYTES, pos + MAGIC_POS, limit)
        if found < 0:
            return None
        start = found - MAGIC_POS
        if (
            start + PHYSICALOFFSET_POS + 8 <= limit
            and INT64.unpack_from(buf, start + PHYSICALOFFSET_POS)[0] == base_offset + start
        ):
            try:
                rec = decode_record(
                    buf,
                    start,
                    base_offset=base_offset,
                    include_body=False,
                    verify_crc=verify_crc,
                    limit=limit,
                )
            except (RecordFormatError, ValueError, IndexError):
                rec = None
            if rec is not None and rec.crc_ok is not False:
                return start
        pos = start + 1
