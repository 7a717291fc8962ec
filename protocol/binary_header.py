"""The ROCKETMQ binary header serialization (serialize type 1), both directions.

Layout (RocketMQSerializable.java in the 4.9 remoting module), all big-endian:

    code        int16
    language    int8    LanguageCode value
    version     int16
    opaque      int32
    flag        int32
    remark      int32 byte length n, then n UTF-8 bytes (n = 0: no remark)
    extFields   int32 byte length m, then m bytes of entries:
                  int16 key length, key bytes, int32 value length, value bytes

Zero-length keys and values decode as empty strings. Any length that points past the header is a
`RemotingProtocolError`.
"""

from __future__ import annotations

import struct
from typing import Final

from .codes import SerializeType
from .command import RemotingCommand
from .errors import RemotingProtocolError

_FIXED: Final = struct.Struct(">hBhiii")  # code, language, version, opaque, flag, remark length
_INT32: Final = struct.Struct(">i")
_INT16: Final = struct.Struct(">h")
FIXED_LENGTH: Final = _FIXED.size + _INT32.size  # + extFields length
assert FIXED_LENGTH == 21


def decode_binary_header(header: bytes | bytearray, body: bytes | None) -> RemotingCommand:
    """Decode a ROCKETMQ header into a command carrying `body`; bad lengths raise."""
    size = len(header)
    if size < FIXED_LENGTH:
        raise RemotingProtocolError(f"binary header of {size} bytes is shorter than 21")
    code, language, version, opaque, flag, remark_len = _FIXED.unpack_from(header, 0)
    pos = _FIXED.size
    remark = None
    if remark_len:
        _check_length("remark", remark_len, pos, size - _INT32.size)
        remark = _utf8(header, pos, remark_len, "remark")
        pos += remark_len
    (map_len,) = _INT32.unpack_from(header, pos)
    pos += _INT32.size
    _check_length("extFields", map_len, pos, size)
    ext_fields = _decode_map(header, pos, pos + map_len)
    if pos + map_len != size:
        raise RemotingProtocolError(f"binary header has {size - pos - map_len} trailing bytes")
    return RemotingCommand(
        code, language, version, opaque, flag, remark, ext_fields, body, SerializeType.ROCKETMQ
    )


def encode_binary_header(command: RemotingCommand) -> bytes:
    """Encode `command`'s header; values outside the wire field ranges raise `struct.error`."""
    remark = command.remark.encode() if command.remark else b""
    parts = [
        _FIXED.pack(
            command.code,
            command.language,
            command.version,
            command.opaque,
            command.flag,
            len(remark),
        ),
        remark,
    ]
    entries: list[bytes] = []
    for key, value in command.ext_fields.items():
        key_bytes = key.encode()
        value_bytes = value.encode()
        entries += (_INT16.pack(len(key_bytes)), key_bytes, _INT32.pack(len(value_bytes)))
        entries.append(value_bytes)
    map_bytes = b"".join(entries)
    parts += (_INT32.pack(len(map_bytes)), map_bytes)
    return b"".join(parts)


def _decode_map(header: bytes | bytearray, pos: int, end: int) -> dict[str, str]:
    result: dict[str, str] = {}
    while pos < end:
        if end - pos < _INT16.size:
            raise RemotingProtocolError(f"binary header extFields entry cut at byte {pos}")
        (key_len,) = _INT16.unpack_from(header, pos)
        pos += _INT16.size
        _check_length("extFields key", key_len, pos, end - _INT32.size)
        key = _utf8(header, pos, key_len, "extFields key")
        pos += key_len
        (value_len,) = _INT32.unpack_from(header, pos)
        pos += _INT32.size
        _check_length("extFields value", value_len, pos, end)
        result[key] = _utf8(header, pos, value_len, "extFields value")
        pos += value_len
    return result


def _check_length(what: str, length: int, pos: int, limit: int) -> None:
    if length < 0 or pos + length > limit:
        raise RemotingProtocolError(
            f"binary header {what} length {length} at byte {pos} exceeds the header"
        )


def _utf8(header: bytes | bytearray, pos: int, length: int, what: str) -> str:
    try:
        return header[pos : pos + length].decode()
    except UnicodeDecodeError as exc:
        raise RemotingProtocolError(f"binary header {what} is not UTF-8: {exc}") from None
