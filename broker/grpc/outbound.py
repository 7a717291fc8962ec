"""A popped message as RocketMQ 5 clients receive it: the stored record -> a 5.x `Message`.

The record's properties split in two: RocketMQ's own (tag, keys, message id, the message
group, delivery time) become `SystemProperties`; the rest are the user's properties. The body
goes out as the producer wrote it, with 5.x's encoding (GZIP when the record is compressed
with zlib; anything else is decompressed here) and an MD5 digest the client checks. The
receipt handle is the POP_CK property the pop wrote; the delivery attempt is one more than the
times the message was consumed before (5.x's proxy: reconsume times + 1).
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Final

from broker.grpc.methods import Message
from protocol.compression import (
    COMPRESSED_FLAG,
    COMPRESSION_TYPE_MASK,
    COMPRESSION_ZLIB,
    decompress_body,
)
from protocol.msgid import encode_offset_msg_id
from protocol.properties import MessageConst, decode_properties
from protocol.v2 import load
from store.decode import CommitLogRecord

#: the property the pop writes each message's receipt handle into
POP_CK: Final = "POP_CK"
#: 5.x's message group (FIFO) and its delivery time, as the proxy stores them
SHARDING_KEY: Final = "__SHARDINGKEY"
TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
#: sysFlag bits of a transaction's message
_TRANSACTION_PREPARED: Final = 0x1 << 2
#: properties that are RocketMQ's own, never shown to the user beside these
_HIDDEN: Final = frozenset(
    {POP_CK, SHARDING_KEY, TIMER_DELIVER_MS, "CLUSTER", "POP_CK_OFFSET", "1ST_POP_TIME"}
)


def timestamp(ms: int) -> Message:
    from google.protobuf.timestamp_pb2 import Timestamp

    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration(ms: int) -> Message:
    from google.protobuf.duration_pb2 import Duration

    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration_ms(value: Message) -> int:
    """A protobuf `Duration` in milliseconds."""
    return int(value.seconds) * 1000 + int(value.nanos) // 1_000_000


def message_id(record: CommitLogRecord, props: dict[str, str]) -> str:
    """The message id a client knows: the producer's unique key, else the offset id."""
    uniq = props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    if uniq:
        return uniq
    host, port = record.store_host
    return encode_offset_msg_id(host, port, record.physical_offset)


def v5_body(record: CommitLogRecord) -> tuple[bytes, str]:
    """The body to send and the name of its 5.x `Encoding`."""
    body = record.body or b""
    if not record.sys_flag & COMPRESSED_FLAG:
        return body, "IDENTITY"
    kind = record.sys_flag & COMPRESSION_TYPE_MASK
    if kind in (0, COMPRESSION_ZLIB):
        # 4.x compresses with zlib's stream format; 5.x clients read GZIP, so rewrap it
        return _gzip(decompress_body(body, record.sys_flag)), "GZIP"
    return decompress_body(body, record.sys_flag), "IDENTITY"


def body_digest(body: bytes) -> Message:
    """The `Digest` of the body bytes sent: MD5 in upper-case hex, as 5.x's proxy sends it.
    The clients agree on no CRC32 text (Python pads 8 hex digits, Java does not pad, Node.js
    writes it in decimal), so a CRC32 digest reads as a corrupt body to some of them; the
    Node.js client also needs a digest on every message it decodes (a check's half too)."""
    definition, _ = load()
    return definition.Digest(
        type=definition.DigestType.Value("MD5"),
        checksum=hashlib.md5(body, usedforsecurity=False).hexdigest().upper(),
    )


def _gzip(data: bytes) -> bytes:
    packer = zlib.compressobj(5, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


def to_v5(
    record: CommitLogRecord,
    *,
    topic: str,
    namespace: str = "",
    invisible_ms: int | None,
    attempt: int | None = None,
) -> Message:
    """The 5.x `Message` of a popped `record` (whose properties carry its POP_CK); `attempt`
    overrides the delivery attempt (FIFO pops count their own). No `invisible_ms`: a message
    that is not received (a transaction check's) has no invisible duration."""
    definition, _ = load()
    props = decode_properties(record.properties)
    body, encoding = v5_body(record)
    system = definition.SystemProperties(
        message_id=message_id(record, props),
        body_digest=body_digest(body),
        body_encoding=definition.Encoding.Value(encoding),
        born_timestamp=timestamp(record.born_timestamp),
        born_host=record.born_host[0],
        store_timestamp=timestamp(record.store_timestamp),
        store_host=f"{record.store_host[0]}:{record.store_host[1]}",
        queue_id=record.queue_id,
        queue_offset=record.queue_offset,
        delivery_attempt=attempt if attempt is not None else record.reconsume_times + 1,
    )
    if invisible_ms is not None:
        system.invisible_duration.CopyFrom(duration(invisible_ms))
    tags = props.get(MessageConst.TAGS)
    if tags:
        system.tag = tags
    keys = props.get(MessageConst.KEYS)
    if keys:
        system.keys.extend(k for k in keys.split(MessageConst.KEY_SEPARATOR) if k)
    receipt = props.get(POP_CK)
    if receipt:
        system.receipt_handle = receipt
    group = props.get(SHARDING_KEY)
    deliver = props.get(TIMER_DELIVER_MS, "")
    if group:
        system.message_group = group
        kind = "FIFO"
    elif deliver.isdigit():
        system.delivery_timestamp.CopyFrom(timestamp(int(deliver)))
        kind = "DELAY"
    elif record.sys_flag & _TRANSACTION_PREPARED or props.get(MessageConst.TRANSACTION_PREPARED):
        kind = "TRANSACTION"
    else:
        kind = "NORMAL"
    system.message_type = definition.MessageType.Value(kind)
    user = {
        k: v for k, v in props.items() if k not in MessageConst.SYSTEM_KEYS and k not in _HIDDEN
    }
    return definition.Message(
        topic=definition.Resource(resource_namespace=namespace, name=topic),
        user_properties=user,
        system_properties=system,
        body=body,
    )
