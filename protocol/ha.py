"""The HA (master-slave replication) wire format of RocketMQ 4.9, sans-IO.

Mirrors the framing of 4.9's `HAConnection` (master side) and `HAService.HAClient` (slave side);
no sockets, no store. Two byte streams run over one TCP connection:

slave -> master: the slave's commit-log max offset, over and over (a report)::

    offset   int64 big-endian   where the slave's commit log ends

master -> slave: transfer frames, a header then the data::

    offset   int64 big-endian   commit-log offset of the first data byte
    size     int32 big-endian   bytes of data that follow (0: a heartbeat)
    data     `size` bytes       commit-log bytes, exactly as the master holds them

Bad input (a negative offset or size, a size over the decoder's bound) raises `HAProtocolError`:
the stream can no longer be trusted and the connection is closed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

#: one transfer frame's header: physical offset, data size
TRANSFER_HEADER: Final = struct.Struct(">qi")
#: a slave's report: its max offset
REPORT: Final = struct.Struct(">q")
assert TRANSFER_HEADER.size == 12
assert REPORT.size == 8
#: 4.9's slave read buffer (`READ_MAX_BUFFER_SIZE`): no frame's data may be larger
DEFAULT_MAX_BODY: Final = 4 * 1024 * 1024


class HAProtocolError(Exception):
    """The peer sent bytes that are not the HA protocol; the message says what was wrong."""


@dataclass(frozen=True, slots=True)
class TransferFrame:
    """Commit-log bytes starting at `offset`; empty `data` is a heartbeat."""

    offset: int
    data: bytes


def encode_transfer(offset: int, data: bytes = b"") -> bytes:
    """One transfer frame; ValueError for a negative offset or data over 2 GiB."""
    if offset < 0:
        raise ValueError(f"offset must not be negative, got {offset}")
    if len(data) >= 1 << 31:
        raise ValueError("data must fit an int32 size")
    return TRANSFER_HEADER.pack(offset, len(data)) + data


def encode_report(offset: int) -> bytes:
    """A slave's report of its max offset; ValueError when negative."""
    if offset < 0:
        raise ValueError(f"offset must not be negative, got {offset}")
    return REPORT.pack(offset)


class TransferDecoder:
    """The slave's side: bytes from the master in, whole `TransferFrame`s out, in order.

    Buffers at most one header plus `max_body` bytes; the size field is checked before its
    data is awaited.
    """

    def __init__(self, max_body: int = DEFAULT_MAX_BODY) -> None:
        if max_body <= 0:
            raise ValueError("max_body must be positive")
        self.max_body = max_body
        self._buffer = bytearray()
        self._header: tuple[int, int] | None = None

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[TransferFrame]:
        """The frames `data` completes; raises HAProtocolError on a bad header."""
        buffer = self._buffer
        buffer += data
        frames: list[TransferFrame] = []
        while True:
            if self._header is None:
                if len(buffer) < TRANSFER_HEADER.size:
                    return frames
                offset, size = TRANSFER_HEADER.unpack_from(buffer)
                if offset < 0:
                    raise HAProtocolError(f"transfer frame with negative offset {offset}")
                if size < 0 or size > self.max_body:
                    raise HAProtocolError(
                        f"transfer frame size {size} outside 0..{self.max_body} at offset {offset}"
                    )
                del buffer[: TRANSFER_HEADER.size]
                self._header = (offset, size)
            offset, size = self._header
            if len(buffer) < size:
                return frames
            frames.append(TransferFrame(offset, bytes(buffer[:size])))
            del buffer[:size]
            self._header = None


class ReportDecoder:
    """The master's side: bytes from the slave in, its reported offsets out, in order."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[int]:
        """The offsets `data` completes; raises HAProtocolError for a negative one."""
        buffer = self._buffer
        buffer += data
        whole = len(buffer) - len(buffer) % REPORT.size
        offsets = [value for (value,) in REPORT.iter_unpack(bytes(buffer[:whole]))]
        del buffer[:whole]
        for offset in offsets:
            if offset < 0:
                raise HAProtocolError(f"slave reported a negative offset {offset}")
        return offsets
