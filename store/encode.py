"""The writer's encoder: messages to commit-log records, byte for byte as RocketMQ 4.9's
`CommitLog.DefaultAppendMessageCallback` lays them out (`store.layout`).

Runs in the putting task, before the writer: a record leaves here complete but for QUEUEOFFSET,
PHYSICALOFFSET and STORETIMESTAMP, which the writer patches once it holds the segment.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import lru_cache

from store.layout import (
    BORNHOST_POS,
    HEADER_STRUCTS,
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    MESSAGE_MAGIC_CODE,
    RECORD_OVERHEAD_BYTES,
)
from store.message import (
    BORNHOST_V6_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    MessageExtBrokerInner,
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
