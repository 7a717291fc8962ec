"""Offset message ids: store host IP + port + commit-log offset as upper-case hex.

16 bytes (32 hex chars) for IPv4, 28 bytes (56 chars) for IPv6 (`MessageDecoder.createMessageId`).
An IPv4-mapped IPv6 address is written as IPv4, as a Java socket address reports it.
"""

from __future__ import annotations

import binascii
import ipaddress
import struct
from typing import Final

_PORT_OFFSET: Final = struct.Struct(">iq")
IPV4_ID_LENGTH: Final = 32
IPV6_ID_LENGTH: Final = 56


class InvalidMessageIdError(ValueError):
    """A message id from a peer that is not a 32- or 56-character hex offset id."""


def encode_offset_msg_id(ip: str, port: int, offset: int) -> str:
    """The offset message id of the record at `offset` stored by `ip:port`."""
    address = ipaddress.ip_address(ip)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (address.packed + _PORT_OFFSET.pack(port, offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """`(ip, port, offset)` of an offset message id; `InvalidMessageIdError` on bad input."""
    if len(msg_id) == IPV4_ID_LENGTH:
        ip_length = 4
    elif len(msg_id) == IPV6_ID_LENGTH:
        ip_length = 16
    else:
        raise InvalidMessageIdError(
            f"message id {msg_id!r} has {len(msg_id)} characters, expected 32 or 56"
        )
    try:
        raw = binascii.unhexlify(msg_id)
    except (binascii.Error, ValueError):
        raise InvalidMessageIdError(f"message id {msg_id!r} is not hexadecimal") from None
    ip = str(ipaddress.ip_address(raw[:ip_length]))
    port, offset = _PORT_OFFSET.unpack_from(raw, ip_length)
    return ip, port, offset
