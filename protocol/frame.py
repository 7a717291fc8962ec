"""Frames: `length | serialize type + header length | header | body`, and their decoder.

    length      int32   bytes after this field: 4 + header length + body length
    headerWord  int32   high byte: SerializeType; low 24 bits: header length
    header      JSON or ROCKETMQ binary (json_header.py / binary_header.py)
    body        the rest; absent (None) when empty

`FrameDecoder` is sans-IO (h2's FrameBuffer, h11's receive_data): feed it bytes as they arrive and
it returns the complete commands. The length prefix is checked as soon as its 4 bytes arrive, so a
hostile peer cannot make it buffer more than one maximal frame.
"""

from __future__ import annotations

import struct
from typing import Final, cast

from .binary_header import decode_binary_header, encode_binary_header
from .codes import SerializeType
from .command import RemotingCommand
from .errors import RemotingProtocolError
from .json_header import decode_json_header, encode_json_header

_PREFIX: Final = struct.Struct(">ii")  # length, headerWord
_INT32: Final = struct.Struct(">i")
_HEADER_LENGTH_MASK: Final = 0xFFFFFF
#: upstream's default `com.rocketmq.remoting.frameMaxLength`
DEFAULT_MAX_FRAME_LENGTH: Final = 16 * 1024 * 1024
_JSON: Final = SerializeType.JSON
_ROCKETMQ: Final = SerializeType.ROCKETMQ


def encode_frame(command: RemotingCommand) -> bytes:
    """The whole frame for `command`, header serialized as `command.serialize_type`."""
    if command.serialize_type is _JSON:
        header = encode_json_header(command)
    else:
        header = encode_binary_header(command)
    header_length = len(header)
    if header_length > _HEADER_LENGTH_MASK:
        raise ValueError(f"header of {header_length} bytes does not fit 24 bits")
    body = command.body
    if not body:
        prefix = _PREFIX.pack(4 + header_length, command.serialize_type << 24 | header_length)
        return prefix + header
    prefix = _PREFIX.pack(
        4 + header_length + len(body), command.serialize_type << 24 | header_length
    )
    return b"".join((prefix, header, body))


class FramesBeforeError(RemotingProtocolError):
    """Bad bytes after whole frames: `decoded` holds those frames, in order. They are valid
    requests and deserve processing and answers before the connection is closed."""

    def __init__(self, message: str, decoded: tuple[RemotingCommand, ...]) -> None:
        super().__init__(message)
        self.decoded = decoded


class FrameDecoder:
    """Incremental frame decoder for one connection.

    After it raised `RemotingProtocolError` the stream is out of sync: every later `feed` raises
    the same error, and the connection should be closed once the frames the error carries in
    `decoded` (those before the bad bytes) are dealt with.
    """

    __slots__ = ("_buffer", "_error", "max_frame_length")

    def __init__(self, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> None:
        self.max_frame_length = max_frame_length
        self._buffer = bytearray()
        self._error: RemotingProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray) -> list[RemotingCommand]:
        """Add received bytes; return every command they complete, in order.

        Raises `RemotingProtocolError` for a negative or oversized length, a header length
        beyond the frame, an unknown serialize type or an undecodable header; the commands this
        call decoded before it are in the error's `decoded`.
        """
        if self._error is not None:
            raise self._error
        buffer: bytes | bytearray
        if self._buffer:
            self._buffer += data
            buffer = self._buffer
        else:
            buffer = data  # common case: no partial frame waiting, parse without copying
        commands: list[RemotingCommand] = []
        try:
            consumed = self._parse(buffer, commands)
        except RemotingProtocolError as exc:
            self._error = exc  # raised again by later feeds, without these commands
            self._buffer = bytearray()
            if not commands:
                raise
            raise FramesBeforeError(str(exc), tuple(commands)) from exc
        if buffer is self._buffer:
            del self._buffer[:consumed]
        elif consumed < len(buffer):
            self._buffer = bytearray(buffer[consumed:])
        return commands

    def _parse(self, buffer: bytes | bytearray, commands: list[RemotingCommand]) -> int:
        pos = 0
        available = len(buffer)
        max_frame_length = self.max_frame_length
        copy_body = type(buffer) is not bytes  # slices of a bytearray are bytearrays
        body: bytes | None
        while available - pos >= 8:
            length, header_word = _PREFIX.unpack_from(buffer, pos)
            if length < 4 or length + 4 > max_frame_length:
                raise RemotingProtocolError(_bad_length(length, max_frame_length))
            header_length = header_word & _HEADER_LENGTH_MASK
            if header_length > length - 4:
                raise RemotingProtocolError(
                    f"header length {header_length} exceeds frame length {length} - 4"
                )
            serialize_type = header_word >> 24 & 0xFF
            if serialize_type > _ROCKETMQ:
                raise RemotingProtocolError(f"unknown serialize type {serialize_type}")
            end = pos + 4 + length
            if end > available:
                return pos
            header_end = pos + 8 + header_length
            body = None
            if header_end < end:
                chunk = buffer[header_end:end]
                body = bytes(chunk) if copy_body else cast(bytes, chunk)
            if serialize_type == _JSON:
                commands.append(decode_json_header(buffer[pos + 8 : header_end], body))
            else:
                commands.append(decode_binary_header(buffer[pos + 8 : header_end], body))
            pos = end
        if available - pos >= 4:  # check a lone length prefix at once, as h2's FrameBuffer does
            (length,) = _INT32.unpack_from(buffer, pos)
            if length < 4 or length + 4 > max_frame_length:
                raise RemotingProtocolError(_bad_length(length, max_frame_length))
        return pos


def _bad_length(length: int, max_frame_length: int) -> str:
    if length < 0:
        return f"negative frame length {length}"
    if length < 4:
        return f"frame length {length} is too short for the header length field"
    return f"frame length {length} + 4 exceeds the maximum {max_frame_length}"
