"""The message model shared by the broker and the store, sysFlag bits, hosts and offset msg ids.

Owns `MessageExtBrokerInner` (a finished record handed to the store), the put results, the
MessageSysFlag constants (RocketMQ `MessageSysFlag`), the host byte encoding (IPv4-mapped IPv6
counts as IPv4, as in Java) and the offset message id of a stored record.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, NamedTuple

from store.status import AppendMessageStatus, PutMessageStatus

COMPRESSED_FLAG: Final = 0x1
MULTI_TAGS_FLAG: Final = 0x2
TRANSACTION_NOT_TYPE: Final = 0x0
TRANSACTION_PREPARED_TYPE: Final = 0x4
TRANSACTION_COMMIT_TYPE: Final = 0x8
TRANSACTION_ROLLBACK_TYPE: Final = 0xC
TRANSACTION_TYPE_MASK: Final = 0xC
BORNHOST_V6_FLAG: Final = 0x10
STOREHOSTADDRESS_V6_FLAG: Final = 0x20
NEED_UNWRAP_FLAG: Final = 0x40
INNER_BATCH_FLAG: Final = 0x80
COMPRESSION_TYPE_MASK: Final = 0x700

_PORT: Final = struct.Struct(">i")
_OFFSET: Final = struct.Struct(">q")


def get_transaction_value(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_TYPE_MASK


def reset_transaction_value(sys_flag: int, transaction_type: int) -> int:
    return (sys_flag & ~TRANSACTION_TYPE_MASK) | transaction_type


def enters_consume_queue(sys_flag: int) -> bool:
    """NOT and COMMIT records take a queue offset; PREPARED and ROLLBACK records do not."""
    return get_transaction_value(sys_flag) in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)


@lru_cache(maxsize=4096)
def encode_host(host: tuple[str, int]) -> tuple[bytes, bool]:
    """(address bytes + int32 port, is_ipv6) of an `(ip text, port)` pair.

    An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is IPv4, as Java's `Inet4Address` makes it.
    Raises ValueError for text that is not an IP address.
    """
    ip_text, port = host
    address = ipaddress.ip_address(ip_text.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.packed + _PORT.pack(port), address.version == 6


@lru_cache(maxsize=4096)
def decode_host(raw: bytes) -> tuple[str, int]:
    """`(ip text, port)` of an encoded host field (8 bytes IPv4, 20 bytes IPv6)."""
    address = ipaddress.ip_address(raw[:-4])
    return str(address), _PORT.unpack_from(raw, len(raw) - 4)[0]


def offset_msg_id(store_host_bytes: bytes, physical_offset: int) -> str:
    """The offset message id: hex of store address, int32 port and int64 physical offset."""
    return (store_host_bytes + _OFFSET.pack(physical_offset)).hex().upper()


@dataclass(slots=True)
class MessageExtBrokerInner:
    """A finished record the broker hands the store (properties already rewritten by the broker)."""

    topic: str
    queue_id: int
    body: bytes
    properties_string: str
    sys_flag: int = 0
    flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    wait_store_msg_ok: bool = True
    tags_code: int = 0


class AppendMessageResult(NamedTuple):
    """Where a put landed: first offset, bytes, one offset msg id per record, queue offset."""

    status: AppendMessageStatus
    wrote_offset: int = 0
    wrote_bytes: int = 0
    msg_ids: tuple[str, ...] = ()
    store_timestamp: int = 0
    logics_offset: int = 0
    msg_num: int = 1

    @property
    def msg_id(self) -> str:
        """All offset msg ids joined by commas (a batch's response `msgId`)."""
        return ",".join(self.msg_ids)


class PutMessageResult(NamedTuple):
    """The outcome of a put: a status, and where it was appended when it was."""

    status: PutMessageStatus
    append_result: AppendMessageResult | None = None

    @property
    def is_ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK


@lru_cache(maxsize=4096)  # producers reuse a handful of tags
def java_string_hash(text: str) -> int:
    """Java's String.hashCode as a signed int32 (over UTF-16 code units): the tags code a
    consume-queue unit carries."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")  # Java hashes lone surrogates too
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def tags_of(properties: str) -> str | None:
    """The TAGS property of a stored properties string, without decoding the rest."""
    for pair in properties.split("\x02"):
        name, sep, value = pair.partition("\x01")
        if sep and name == "TAGS":
            return value
    return None


def tags_code_of(properties: str) -> int:
    tags = tags_of(properties)
    return java_string_hash(tags) if tags else 0


def message_tags_code(msg: MessageExtBrokerInner) -> int:
    """The broker sets `tags_code` from TAGS; a message built without it gets it from there."""
    if msg.tags_code or "TAGS\x01" not in msg.properties_string:
        return msg.tags_code
    return tags_code_of(msg.properties_string)
