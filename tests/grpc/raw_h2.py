"""A raw HTTP/2 client (the `h2` library over a plain trio socket) for requests no gRPC library
would send: wrong methods, headers and frames, floods and garbage."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import h2.config
import h2.connection
import h2.events
import trio

from tests.grpc.server_harness import SERVICE


@dataclass
class Answer:
    """What came back on one stream."""

    headers: dict[str, str] = field(default_factory=dict)
    data: bytes = b""
    trailers: dict[str, str] = field(default_factory=dict)
    reset: int | None = None
    ended: bool = False

    @property
    def status(self) -> str | None:
        """grpc-status, from the trailers or a trailers-only response."""
        return self.trailers.get("grpc-status", self.headers.get("grpc-status"))


def grpc_headers(
    path: str = SERVICE + "Unary", extra: list[tuple[str, str]] | None = None, **overrides: str
) -> list[tuple[str, str]]:
    """A valid gRPC request's headers; `overrides` replace (or with "" remove) one."""
    base = {
        ":method": "POST",
        ":scheme": "http",
        ":path": path,
        ":authority": "127.0.0.1",
        "content-type": "application/grpc",
        "te": "trailers",
    }
    for name, value in overrides.items():
        key = name.replace("_", "-") if not name.startswith("p_") else ":" + name[2:]
        if value:
            base[key] = value
        else:
            base.pop(key, None)
    return [*base.items(), *(extra or [])]


def frame(payload: bytes, compressed: bool = False) -> bytes:
    return struct.pack(">BI", int(compressed), len(payload)) + payload


class RawClient:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(header_encoding="utf-8"))
        self.answers: dict[int, Answer] = {}
        self.closed = False
        self.goaway: h2.events.ConnectionTerminated | None = None

    @classmethod
    async def open(cls, port: int) -> RawClient:
        client = cls(await trio.open_tcp_stream("127.0.0.1", port))
        client.h2.initiate_connection()
        await client.flush()
        return client

    async def settle(self) -> None:
        """Read until the server's SETTINGS and window updates are in (the windows it grants)."""
        with trio.fail_after(10):
            while self.h2.outbound_flow_control_window <= 65_535:
                await self.receive()

    async def flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            try:
                await self.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.closed = True

    async def request(
        self, headers: list[tuple[str, str]], body: bytes = b"", end: bool = True
    ) -> int:
        stream_id: int = self.h2.get_next_available_stream_id()
        self.h2.send_headers(stream_id, headers, end_stream=end and not body)
        size = self.h2.max_outbound_frame_size
        for start in range(0, len(body), size):
            last = start + size >= len(body)
            self.h2.send_data(stream_id, body[start : start + size], end_stream=end and last)
        self.answers[stream_id] = Answer()
        await self.flush()
        return stream_id

    async def receive(self) -> None:
        """Read once and handle what arrived; sets `closed` at EOF."""
        try:
            data = await self.stream.receive_some(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        if not data:
            self.closed = True
            return
        for event in self.h2.receive_data(data):
            self._on(event)
        await self.flush()

    def _on(self, event: Any) -> None:
        answer = self.answers.get(getattr(event, "stream_id", 0) or 0)
        if isinstance(event, h2.events.ResponseReceived) and answer is not None:
            answer.headers = {str(k): str(v) for k, v in event.headers}
        elif isinstance(event, h2.events.TrailersReceived) and answer is not None:
            answer.trailers = {str(k): str(v) for k, v in event.headers}
        elif isinstance(event, h2.events.DataReceived) and answer is not None:
            answer.data += event.data
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded) and answer is not None:
            answer.ended = True
        elif isinstance(event, h2.events.StreamReset) and answer is not None:
            answer.reset = event.error_code
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.goaway = event

    async def answer(self, stream_id: int, timeout_s: float = 10) -> Answer:
        """Read until `stream_id` is ended or reset (or the connection closes)."""
        answer = self.answers[stream_id]
        with trio.fail_after(timeout_s):
            while not (answer.ended or answer.reset is not None or self.closed):
                await self.receive()
        return answer

    async def until_closed(self, timeout_s: float = 10) -> None:
        with trio.fail_after(timeout_s):
            while not self.closed:
                await self.receive()

    async def aclose(self) -> None:
        await self.stream.aclose()
