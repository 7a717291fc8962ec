"""gRPC over HTTP/2, the parts that are not HTTP/2: message framing and the gRPC headers.

Sans-IO (no trio, no h2): the server feeds DATA bytes in and gets messages out.

- A message on the wire is a 1-byte compressed flag, a 4-byte big-endian length and the payload
  (gRPC's PROTOCOL-HTTP2 "Length-Prefixed-Message"). `MessageDecoder` refuses a length above its
  limit before buffering the payload.
- Compression: a message with the flag set is decoded only under `grpc-encoding: gzip` (the one
  codec besides identity that gRPC clients offer; the RocketMQ 5 clients send uncompressed by
  default). The flag without a negotiated encoding is a protocol error (INTERNAL); an encoding
  the server does not know is UNIMPLEMENTED, answered with `grpc-accept-encoding`. The server
  itself never compresses.
- `grpc-timeout` is at most 8 digits and a unit (H, M, S, m, u, n).
- `grpc-message` is percent-encoded UTF-8: bytes outside 0x20..0x7E and `%` itself.
- Metadata whose name ends in `-bin` is base64, padded or not.
"""

from __future__ import annotations

import base64
import binascii
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

PREFIX_SIZE: Final = 5
_PREFIX: Final = struct.Struct(">BI")
#: the encodings a request may use, as `grpc-accept-encoding` lists them
ACCEPT_ENCODING: Final = "identity,gzip"
_SUPPORTED_ENCODINGS: Final = frozenset({"identity", "gzip"})
#: seconds per `grpc-timeout` unit
_TIMEOUT_UNITS: Final = {
    "H": 3600.0,
    "M": 60.0,
    "S": 1.0,
    "m": 1e-3,
    "u": 1e-6,
    "n": 1e-9,
}
#: a name gRPC keeps for itself or HTTP/2 uses: not passed to handlers as metadata
_RESERVED_HEADERS: Final = frozenset(
    {"content-type", "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding", "user-agent"}
)

# gRPC status codes used here (the same numbers as broker.grpc.methods.StatusCode)
INTERNAL: Final = 13
UNIMPLEMENTED: Final = 12
RESOURCE_EXHAUSTED: Final = 8


class WireError(Exception):
    """A request the call cannot go on with: end it with gRPC status `status` and `message`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def encode_message(payload: bytes) -> bytes:
    """One uncompressed length-prefixed message."""
    return _PREFIX.pack(0, len(payload)) + payload


def check_encoding(encoding: str | None) -> None:
    """`WireError(UNIMPLEMENTED)` for a `grpc-encoding` this side cannot decode."""
    if encoding is not None and encoding not in _SUPPORTED_ENCODINGS:
        raise WireError(UNIMPLEMENTED, f"grpc-encoding {encoding!r} is not supported")


@dataclass(slots=True)
class MessageDecoder:
    """Length-prefixed messages out of a stream's DATA bytes, none larger than `max_size`.

    `encoding` is the request's `grpc-encoding` (None or "identity": no compression).
    """

    max_size: int
    encoding: str | None = None
    _buffer: bytearray | None = None

    def __post_init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The messages completed by `data`; `WireError` for one too large or undecodable."""
        buffer = self._buffer
        assert buffer is not None
        buffer += data
        messages: list[bytes] = []
        while len(buffer) >= PREFIX_SIZE:
            flag, length = _PREFIX.unpack_from(buffer)
            if flag not in (0, 1):
                raise WireError(INTERNAL, f"compressed flag {flag} is neither 0 nor 1")
            if length > self.max_size:
                raise WireError(
                    RESOURCE_EXHAUSTED,
                    f"message of {length} bytes is larger than the limit of {self.max_size}",
                )
            if len(buffer) < PREFIX_SIZE + length:
                break
            payload = bytes(buffer[PREFIX_SIZE : PREFIX_SIZE + length])
            del buffer[: PREFIX_SIZE + length]
            messages.append(self._decompress(payload) if flag else payload)
        return messages

    @property
    def pending(self) -> int:
        """Bytes of an incomplete message held."""
        return len(self._buffer or b"")

    def _decompress(self, payload: bytes) -> bytes:
        if self.encoding in (None, "identity"):
            raise WireError(INTERNAL, "a compressed message without a grpc-encoding")
        # gzip only (check_encoding refused the rest); never more than max_size out
        inflater = zlib.decompressobj(wbits=31)
        try:
            out = inflater.decompress(payload, self.max_size + 1)
        except zlib.error as exc:
            raise WireError(INTERNAL, f"gzip message cannot be decompressed: {exc}") from None
        if len(out) > self.max_size:
            raise WireError(
                RESOURCE_EXHAUSTED,
                f"decompressed message is larger than the limit of {self.max_size}",
            )
        if not inflater.eof:
            raise WireError(INTERNAL, "gzip message is truncated")
        return out


def parse_timeout(text: str) -> float:
    """`grpc-timeout` in seconds; ValueError when it is not 1-8 digits and a known unit."""
    value, unit = text[:-1], text[-1:]
    if not (1 <= len(value) <= 8 and value.isascii() and value.isdigit()):
        raise ValueError(f"bad grpc-timeout {text!r}")
    try:
        return int(value) * _TIMEOUT_UNITS[unit]
    except KeyError:
        raise ValueError(f"bad grpc-timeout unit in {text!r}") from None


def encode_grpc_message(text: str) -> str:
    """`text` as the `grpc-message` header carries it (percent-encoded UTF-8)."""
    return "".join(
        chr(b) if 0x20 <= b <= 0x7E and b != 0x25 else f"%{b:02X}" for b in text.encode()
    )


def decode_grpc_message(text: str) -> str:
    """The inverse of `encode_grpc_message`; a malformed escape is kept as it is."""
    out = bytearray()
    i = 0
    raw = text.encode("latin-1", "replace")
    while i < len(raw):
        if raw[i] == 0x25 and i + 2 < len(raw):
            try:
                out.append(int(raw[i + 1 : i + 3], 16))
                i += 3
                continue
            except ValueError:
                pass
        out.append(raw[i])
        i += 1
    return out.decode("utf-8", "replace")


def decode_binary_header(value: str) -> bytes:
    """A `-bin` header's value: base64 with or without padding; ValueError otherwise."""
    stripped = value.strip().rstrip("=")
    try:
        return base64.b64decode(stripped + "=" * (-len(stripped) % 4), validate=True)
    except binascii.Error as exc:
        raise ValueError(f"bad base64 in a -bin header: {exc}") from None


def metadata(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The request's custom metadata: names in lower case, pseudo-headers and gRPC's own left
    out, `-bin` values decoded (as latin-1 text); ValueError for a bad `-bin` value. A repeated
    name keeps its values joined by "," as HTTP does."""
    result: dict[str, str] = {}
    for raw_name, raw_value in headers:
        name = raw_name.lower()
        if name.startswith(":") or name in _RESERVED_HEADERS:
            continue
        value = raw_value
        if name.endswith("-bin"):
            value = decode_binary_header(raw_value).decode("latin-1")
        result[name] = f"{result[name]},{value}" if name in result else value
    return result
