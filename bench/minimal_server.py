"""The least a Trio server does for the send bench's frames: split them, answer each with a canned
SUCCESS, one write per receive. No store, no checks: the floor the broker is measured against.

    python bench/minimal_server.py --listen 127.0.0.1:PORT

Prints `minimal server listening on HOST:PORT` (the bound port, so PORT may be 0) once it
accepts connections, and exits with status 0 on SIGINT or SIGTERM.

A frame is `length | headerWord | header | body` (big-endian int32s; the header word's high byte
is the serialize type, its low 24 bits the header length). Of a request only the JSON header's
top-level `"opaque"` is read, by a regex over the header bytes: extFields values are JSON strings
(a `"` inside one is escaped), so the only `"opaque":` followed by a number is the top-level key.
The reply is the broker's send response with fixed values: code 0, flag 1 (response), the
request's opaque digits copied as they came, extFields msgId, queueId and queueOffset. A frame
that is not JSON, has no opaque or has an impossible length closes its connection after the
replies to the frames before it, with one log line.
"""

from __future__ import annotations

import argparse
import re
import signal
import struct
from collections.abc import Sequence
from typing import Final

import structlog
import trio

log = structlog.get_logger()

RECEIVE_SIZE: Final = 256 * 1024
#: upstream's default frame limit; a longer length prefix is a broken stream
MAX_FRAME_LENGTH: Final = 16 * 1024 * 1024
_PREFIX: Final = struct.Struct(">II")  # length, headerWord
_HEADER_LENGTH_MASK: Final = 0xFFFFFF
_JSON: Final = 0
_OPAQUE: Final = re.compile(rb'"opaque"\s*:\s*(-?\d+)')
#: the reply's JSON header around the opaque, in the order and form the broker writes it
_HEAD: Final = (
    b'{"code":0,"extFields":{"msgId":"7F00000100002A9F0000000000000000",'
    b'"queueId":"0","queueOffset":"0"},"flag":1,"language":"JAVA","opaque":'
)
_TAIL: Final = b',"serializeTypeCurrentRPC":"JSON","version":407}'
_FIXED: Final = len(_HEAD) + len(_TAIL)


def answer(buffer: bytes | bytearray) -> tuple[bytes, int, str | None]:
    """The replies to the whole frames at the start of `buffer`, joined; how many bytes those
    frames took; and why the stream is broken at that point, or None (more bytes may follow)."""
    parts: list[bytes] = []
    pos, end = 0, len(buffer)
    while end - pos >= 8:
        length, word = _PREFIX.unpack_from(buffer, pos)
        header_length = word & _HEADER_LENGTH_MASK
        if length < 4 + header_length or length > MAX_FRAME_LENGTH:
            return b"".join(parts), pos, f"frame length {length}, header length {header_length}"
        if word >> 24 != _JSON:
            return b"".join(parts), pos, f"serialize type {word >> 24}, only JSON is answered"
        if end - pos < 4 + length:
            break
        found = _OPAQUE.search(buffer, pos + 8, pos + 8 + header_length)
        if found is None:
            return b"".join(parts), pos, "no opaque in the header"
        opaque = found.group(1)
        size = _FIXED + len(opaque)
        parts += (_PREFIX.pack(4 + size, size), _HEAD, opaque, _TAIL)
        pos += 4 + length
    return b"".join(parts), pos, None


async def serve_connection(stream: trio.SocketStream) -> None:
    """Answer every request frame on `stream` until the peer closes it or breaks the framing."""
    pending = b""  # the start of a frame whose end has not arrived yet
    try:
        while data := await stream.receive_some(RECEIVE_SIZE):
            if pending:
                data = pending + data
            replies, used, error = answer(data)
            pending = data[used:]
            if replies:
                await stream.send_all(replies)
            if error is not None:
                log.warning("minimal_server_bad_frame", error=error)
                return
    except trio.BrokenResourceError:
        pass  # the peer went away; nothing is owed to it
    finally:
        await stream.aclose()


async def serve(host: str, port: int) -> None:
    """Listen on host:port, print the ready line, serve until SIGINT or SIGTERM."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, serve_connection, listeners)
            print(f"minimal server listening on {host}:{bound}", flush=True)
            async for signum in signals:
                log.info("minimal_server_stopping", signal=signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0: any free)")
    args = parser.parse_args(argv)
    host, _, port = str(args.listen).rpartition(":")
    if not host or not port.isdigit():
        parser.error(f"--listen wants HOST:PORT, got {args.listen!r}")
    trio.run(serve, host, int(port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
