"""The commit-log record of RocketMQ 4.9 (`CommitLog.DefaultAppendMessageCallback`,
`CommitLog.checkMessageAndReturnSize`, `MessageDecoder`): encode, decode, validate.

Owns bytes only: no files, no clock. The layout itself (magic codes, structs, field positions)
is `store.layout`.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from store.layout import (
    BLANK_MAGIC_CODE,
    BORNHOST_POS,
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
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    PHYSICALOFFSET_POS,
    RECORD_OVERHEAD_BYTES,
    SIZE_MAGIC,
    SYSFLAG_POS,
    Buffer,
    cal_msg_length,
)
from store.message import (
    BORNHOST_V6_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    MessageExtBrokerInner,
    decode_host,
    encode_host,
    enters_consume_queue,
    message_tags_code,
)
from store.status import AppendMessageStatus


@dataclass(slots=True)  # not frozen: built once per put on the hot path, never mutated
class EncodedBatch:
    """One or more consecutive records, encoded in the caller's task, ready for the writer.

    `records` holds each record's (start, STORETIMESTAMP position) relative to `data`; the writer
    patches QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP after copying `data` into a segment.
    `topic`, `queue_id` and `tags_codes` (one per record) are what the consume queue needs, so
    the dispatcher does not decode the records the writer has just encoded.
    """

    data: bytes
    records: tuple[tuple[int, int], ...]
    topic_queue_key: str
    enters_consume_queue: bool
    store_host_bytes: bytes
    topic: str
    queue_id: int
    tags_codes: tuple[int, ...]

    @property
    def total_size(self) -> int:
        return len(self.data)

    @property
    def msg_num(self) -> int:
        return len(self.records)


def encode_record(
    msg: MessageExtBrokerInner, store_timestamp: int, max_message_size: int
) -> tuple[bytes, int] | AppendMessageStatus:
    """(record bytes with offsets 0, STORETIMESTAMP position) or why it cannot be stored.

    PROPERTIES_SIZE_EXCEEDED: properties over 32767 UTF-8 bytes. MESSAGE_SIZE_EXCEEDED: body over
    `max_message_size`, topic over 127 bytes, or the record over `max_message_size` + 64 KiB.
    Raises ValueError for a host that is not an IP address (a broker bug, not peer input).
    """
    body = msg.body
    topic_bytes = topic_field(msg.topic)
    # A lone surrogate (legal in a JSON header) is stored as "?", as Java's getBytes(UTF_8) does.
    properties = msg.properties_string.encode("utf-8", "replace")
    if len(properties) > MAX_PROPERTIES_BYTES:
        return AppendMessageStatus.PROPERTIES_SIZE_EXCEEDED
    born, born_v6 = encode_host(msg.born_host)
    store, store_v6 = encode_host(msg.store_host)
    sys_flag = msg.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
    sys_flag |= (BORNHOST_V6_FLAG if born_v6 else 0) | (STOREHOSTADDRESS_V6_FLAG if store_v6 else 0)
    # cal_msg_length inlined: 75 + b + s + B + T + P, the topic field holding 1 + T bytes.
    length = 74 + len(born) + len(store) + len(body) + len(topic_bytes) + len(properties)
    too_long = len(body) > max_message_size or length > max_message_size + RECORD_OVERHEAD_BYTES
    if too_long or len(topic_bytes) > MAX_TOPIC_BYTES + 1:
        return AppendMessageStatus.MESSAGE_SIZE_EXCEEDED
    header = HEADER_STRUCTS[(born_v6, store_v6)].pack(
        length,
        MESSAGE_MAGIC_CODE,
        zlib.crc32(body) & 0x7FFFFFFF,
        msg.queue_id,
        msg.flag,
        0,
        0,
        sys_flag,
        msg.born_timestamp,
        born,
        store_timestamp,
        store,
        msg.reconsume_times,
        msg.prepared_transaction_offset,
        len(body),
    )
    size = len(properties).to_bytes(2, "big")
    return b"".join((header, body, topic_bytes, size, properties)), BORNHOST_POS + len(born)


@lru_cache(maxsize=8192)
def topic_field(topic: str) -> bytes:
    """The TOPIC field: int8 length then UTF-8 (a length over 127 is refused by the caller)."""
    encoded = topic.encode()
    return bytes((min(len(encoded), 255),)) + encoded


def encode_batch(
    msgs: list[MessageExtBrokerInner], store_timestamp: int, max_message_size: int
) -> EncodedBatch | AppendMessageStatus:
    """Consecutive records of one topic and queue; the first failing record's status otherwise."""
    first = msgs[0]
    if len(msgs) == 1:
        encoded = encode_record(first, store_timestamp, max_message_size)
        if isinstance(encoded, AppendMessageStatus):
            return encoded
        return EncodedBatch(
            encoded[0],
            ((0, encoded[1]),),
            f"{first.topic}-{first.queue_id}",
            enters_consume_queue(first.sys_flag),
            encode_host(first.store_host)[0],
            first.topic,
            first.queue_id,
            (message_tags_code(first),),
        )
    parts: list[bytes] = []
    records: list[tuple[int, int]] = []
    position = 0
    for msg in msgs:
        encoded = encode_record(msg, store_timestamp, max_message_size)
        if isinstance(encoded, AppendMessageStatus):
            return encoded
        data, ts_pos = encoded
        parts.append(data)
        records.append((position, position + ts_pos))
        position += len(data)
    return EncodedBatch(
        data=parts[0] if len(parts) == 1 else b"".join(parts),
        records=tuple(records),
        topic_queue_key=f"{first.topic}-{first.queue_id}",
        enters_consume_queue=enters_consume_queue(first.sys_flag),
        store_host_bytes=encode_host(first.store_host)[0],
        topic=first.topic,
        queue_id=first.queue_id,
        tags_codes=tuple(message_tags_code(msg) for msg in msgs),
    )


class RecordFormatError(Exception):
    """The bytes at `offset` are not a valid record; `reason` says which check failed."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"invalid record at physical offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


@dataclass(frozen=True, slots=True)
class CommitLogRecord:
    """One decoded record. `crc_ok` is None when the CRC was not checked; `body` None if skipped."""

    physical_offset: int
    total_size: int
    topic: str
    queue_id: int
    queue_offset: int
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    body_crc: int
    crc_ok: bool | None
    properties: str
    body: bytes | None


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
    body_start = pos + header.size
    body = bytes(buf[body_start:topic_pos]) if include_body or verify_crc else None
    crc = f[FIELD_BODY_CRC]
    crc_ok = (zlib.crc32(body or b"") & 0x7FFFFFFF) == crc if verify_crc else None
    born, store = f[FIELD_BORN_HOST], f[FIELD_STORE_HOST]
    return CommitLogRecord(
        physical_offset=f[FIELD_PHYSICAL_OFFSET],
        total_size=f[FIELD_TOTAL_SIZE],
        topic=bytes(buf[topic_pos + 1 : props_pos]).decode(errors="replace"),
        queue_id=f[FIELD_QUEUE_ID],
        queue_offset=f[FIELD_QUEUE_OFFSET],
        flag=f[FIELD_FLAG],
        sys_flag=f[FIELD_SYS_FLAG],
        born_timestamp=f[FIELD_BORN_TIMESTAMP],
        born_host=decode_host(born),
        store_timestamp=f[FIELD_STORE_TIMESTAMP],
        store_host=decode_host(store),
        reconsume_times=f[FIELD_RECONSUME_TIMES],
        prepared_transaction_offset=f[FIELD_PREPARED_TRANSACTION_OFFSET],
        body_crc=crc,
        crc_ok=crc_ok,
        properties=bytes(buf[props_pos + 2 : props_pos + 2 + props_len]).decode(errors="replace"),
        body=body if include_body else None,
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
    except (RecordFormatError, ValueError, IndexError) as exc:
        return RecordCheck(-1, False, reason=str(exc))
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
