"""The client-side batch body of SEND_BATCH_MESSAGE (and the C++ client's batch SEND_MESSAGE).

One entry per message, concatenated, no count (`MessageDecoder.encodeMessages`, 4.9):

    totalSize   int32   22 + body length + properties length
    magic       int32   0 from clients; ignored
    bodyCRC     int32   0 from clients; ignored (the broker computes it)
    flag        int32   per-message user flag
    bodyLength  int32
    body        bodyLength bytes
    propsLength int16
    properties  propsLength bytes of UTF-8 (properties.py format)

A malformed body is the sender's fault: `BatchBodyError`, answered MESSAGE_ILLEGAL.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from .errors import BatchBodyError

__all__ = ["BatchBodyError", "BatchEntry", "decode_batch_body", "encode_batch_body"]

_ENTRY_HEAD: Final = struct.Struct(">iiiii")  # totalSize, magic, bodyCRC, flag, bodyLength
_PROPS_LENGTH: Final = struct.Struct(">h")
ENTRY_OVERHEAD: Final = _ENTRY_HEAD.size + _PROPS_LENGTH.size
assert ENTRY_OVERHEAD == 22


@dataclass(frozen=True, slots=True)
class BatchEntry:
    flag: int
    body: bytes
    properties: str


def decode_batch_body(body: bytes) -> list[BatchEntry]:
    """Split a batch body into its messages; `BatchBodyError` says what is wrong and where."""
    entries: list[BatchEntry] = []
    pos = 0
    size = len(body)
    if size == 0:
        raise BatchBodyError("batch body is empty")
    while pos < size:
        if size - pos < ENTRY_OVERHEAD:
            raise BatchBodyError(f"batch entry at byte {pos} is cut short: {size - pos} bytes left")
        total, _magic, _crc, flag, body_length = _ENTRY_HEAD.unpack_from(body, pos)
        if body_length < 0 or body_length > size - pos - ENTRY_OVERHEAD:
            raise BatchBodyError(f"batch entry at byte {pos} has bad body length {body_length}")
        props_at = pos + _ENTRY_HEAD.size + body_length
        (props_length,) = _PROPS_LENGTH.unpack_from(body, props_at)
        end = props_at + _PROPS_LENGTH.size + props_length
        if props_length < 0 or end > size:
            raise BatchBodyError(
                f"batch entry at byte {pos} has bad properties length {props_length}"
            )
        if total != end - pos:
            raise BatchBodyError(
                f"batch entry at byte {pos} has total size {total}, its fields make {end - pos}"
            )
        try:
            properties = body[props_at + _PROPS_LENGTH.size : end].decode()
        except UnicodeDecodeError:
            raise BatchBodyError(f"batch entry at byte {pos} has non-UTF-8 properties") from None
        message = body[pos + _ENTRY_HEAD.size : props_at]
        entries.append(BatchEntry(flag, bytes(message), properties))
        pos = end
    return entries


def encode_batch_body(entries: Iterable[BatchEntry]) -> bytes:
    """What a client sends: magic and CRC written as 0. Properties over 32767 bytes raise."""
    parts: list[bytes] = []
    for entry in entries:
        properties = entry.properties.encode()
        total = ENTRY_OVERHEAD + len(entry.body) + len(properties)
        parts.append(_ENTRY_HEAD.pack(total, 0, 0, entry.flag, len(entry.body)))
        parts.append(entry.body)
        parts.append(_PROPS_LENGTH.pack(len(properties)))
        parts.append(properties)
    return b"".join(parts)
