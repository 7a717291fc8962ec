"""One gRPC call on one HTTP/2 stream: its received messages and the task that runs its handler.

The connection task feeds a `CallStream` (DATA, end of stream, RST_STREAM) and never waits on
it; the call's task reads messages from it, runs the handler and writes the answer through
the connection (`CallTransport`). Received bytes are handed back to flow control once the
handler has taken the message they made, so a handler that does not read holds at most one
stream window plus one partial message.

Imported by the connection on the first gRPC connection (protobuf is imported here).
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Final, Protocol

import structlog
import trio
from google.protobuf.message import DecodeError

from broker.grpc.methods import (
    BidiHandler,
    CallContext,
    GrpcError,
    Kind,
    Message,
    Method,
    MethodTable,
    ServerStreamHandler,
    StatusCode,
    UnaryHandler,
)
from protocol import grpc_wire
from protocol.grpc_wire import MessageDecoder, WireError

log = structlog.get_logger()


_GRPC_CONTENT_TYPES: Final = ("application/grpc", "application/grpc+proto")
RESPONSE_HEADERS: Final = [
    (":status", "200"),
    ("content-type", "application/grpc"),
    ("grpc-accept-encoding", grpc_wire.ACCEPT_ENCODING),
]


class RefusedError(Exception):
    """A request answered at once with a trailers-only response."""

    def __init__(self, status: StatusCode, message: str, http_status: int = 200) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.http_status = http_status


@dataclass(frozen=True, slots=True)
class Request:
    """A request's headers, checked."""

    path: str
    method: Method
    #: seconds from now the client gives the call (grpc-timeout), or inf
    timeout_s: float
    encoding: str | None
    metadata: dict[str, str]


def parse_request(headers: list[tuple[str, str]], methods: MethodTable) -> Request:
    """The call a request's headers ask for; `RefusedError` for one that is not gRPC (HTTP
    405/415, INTERNAL), an unknown method (UNIMPLEMENTED), an encoding not supported
    (UNIMPLEMENTED) or bad gRPC headers (INTERNAL)."""
    pseudo = {k: v for k, v in headers if k.startswith(":")}
    fields = {k.lower(): v for k, v in headers if not k.startswith(":")}
    path = pseudo.get(":path", "")
    if pseudo.get(":method") != "POST":
        raise RefusedError(StatusCode.INTERNAL, "gRPC needs POST", http_status=405)
    content_type = fields.get("content-type", "")
    if content_type.split(";")[0].strip() not in _GRPC_CONTENT_TYPES:
        message = f"content-type {content_type!r} is not application/grpc"
        raise RefusedError(StatusCode.INTERNAL, message, http_status=415)
    if fields.get("te") != "trailers":
        raise RefusedError(StatusCode.INTERNAL, "gRPC needs the header te: trailers")
    method = methods.get(path)
    if method is None:
        raise RefusedError(StatusCode.UNIMPLEMENTED, f"unknown method {path}")
    timeout = fields.get("grpc-timeout")
    encoding = fields.get("grpc-encoding")
    try:
        timeout_s = math.inf if timeout is None else grpc_wire.parse_timeout(timeout)
        grpc_wire.check_encoding(encoding)
        metadata = grpc_wire.metadata(headers)
    except WireError as exc:
        raise RefusedError(StatusCode(exc.status), exc.message) from None
    except ValueError as exc:
        raise RefusedError(StatusCode.INTERNAL, str(exc)) from None
    return Request(path, method, timeout_s, encoding, metadata)


def trailers_of(status: StatusCode, message: str, http_status: int | None) -> list[tuple[str, str]]:
    """The trailers; with `http_status`, a trailers-only response (headers and trailers)."""
    fields = [("grpc-status", str(int(status)))]
    if message:
        fields.append(("grpc-message", grpc_wire.encode_grpc_message(message)))
    if http_status is None:
        return fields
    head = [(":status", str(http_status)), ("content-type", "application/grpc")]
    if status is StatusCode.UNIMPLEMENTED:
        head.append(("grpc-accept-encoding", grpc_wire.ACCEPT_ENCODING))
    return head + fields


class TransportClosedError(Exception):
    """The connection under a call is gone: the call ends without an answer."""


class ConnectionEndedError(TransportClosedError):
    """The connection cannot go on; `reason` is a snake_case word for the log."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class CallTransport(Protocol):
    """What a call needs of its connection."""

    async def send_message(
        self, stream: CallStream, payload: bytes, *, last: bool = False
    ) -> None: ...

    async def send_trailers(self, stream: CallStream, status: int, message: str) -> None: ...

    async def acknowledge(self, stream: CallStream, size: int) -> None: ...


class CallStream:
    """The state of one stream, shared by the connection task and the call's task."""

    def __init__(self, stream_id: int, decoder: MessageDecoder, deadline: float) -> None:
        self.stream_id = stream_id
        self.decoder = decoder
        #: cancelled by the peer's RST_STREAM, by the deadline, or when the connection ends
        self.scope = trio.CancelScope(deadline=deadline)
        self.deadline = deadline
        #: the client half-closed (END_STREAM)
        self.ended = False
        #: the peer reset the stream: nothing more is sent on it
        self.reset = False
        #: response headers sent (else the trailers go out as a trailers-only response)
        self.headers_sent = False
        #: set when the peer's flow-control window may have grown
        self.window = trio.Event()
        self.error: WireError | None = None
        self._messages: deque[bytes] = deque()
        self._changed = trio.Event()
        #: flow-controlled bytes received and not yet handed back
        self._held = 0
        self._queued_bytes = 0

    @property
    def buffered(self) -> int:
        """Bytes of request messages held: whole ones not taken yet and a partial one."""
        return self._queued_bytes + self.decoder.pending

    def on_data(self, data: bytes, flow_length: int) -> int:
        """DATA arrived; the bytes to hand back to flow control at once."""
        self._held += flow_length
        if self.error is None:
            try:
                for message in self.decoder.feed(data):
                    self._messages.append(message)
                    self._queued_bytes += len(message)
            except WireError as exc:
                self.error = exc
        self._wake()
        if self._messages and self.error is None:
            return 0  # handed back as the handler takes them
        released, self._held = self._held, 0
        return released

    def on_end(self) -> None:
        self.ended = True
        self._wake()

    def on_reset(self) -> None:
        self.reset = True
        self.scope.cancel()
        self.wake_sender()
        self._wake()

    def wake_sender(self) -> None:
        self.window.set()
        self.window = trio.Event()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def next_message(self, transport: CallTransport) -> bytes | None:
        """The next request message; None once the client half-closed. Raises `WireError`."""
        while True:
            if self._messages:
                payload = self._messages.popleft()
                self._queued_bytes -= len(payload)
                if not self._messages and self._held:
                    released, self._held = self._held, 0
                    await transport.acknowledge(self, released)
                return payload
            if self.error is not None:
                raise self.error
            if self.ended:
                if self.decoder.pending:
                    raise WireError(StatusCode.INTERNAL, "the stream ended inside a message")
                return None
            await self._changed.wait()


def _decode(method: Method, payload: bytes) -> Message:
    try:
        return method.request_type.FromString(payload)
    except (DecodeError, ValueError) as exc:
        name = getattr(method.request_type, "__name__", "request")
        raise GrpcError(StatusCode.INTERNAL, f"cannot decode {name}: {exc}") from None


async def _single_request(stream: CallStream, method: Method, transport: CallTransport) -> Message:
    payload = await stream.next_message(transport)
    if payload is None:
        raise GrpcError(StatusCode.INTERNAL, "no request message")
    if await stream.next_message(transport) is not None:
        raise GrpcError(StatusCode.INTERNAL, "more than one request message on a unary call")
    return _decode(method, payload)


async def _requests(
    stream: CallStream, method: Method, transport: CallTransport
) -> AsyncGenerator[Message]:
    while (payload := await stream.next_message(transport)) is not None:
        yield _decode(method, payload)


async def _dispatch(
    stream: CallStream, method: Method, context: CallContext, transport: CallTransport
) -> None:
    async def send(message: Message) -> None:
        await transport.send_message(stream, message.SerializeToString())

    if method.kind is Kind.UNARY:
        request = await _single_request(stream, method, transport)
        unary: UnaryHandler = method.handler  # type: ignore[assignment]
        response = await unary(request, context)
        await transport.send_message(stream, response.SerializeToString(), last=True)
    elif method.kind is Kind.SERVER_STREAM:
        request = await _single_request(stream, method, transport)
        streaming: ServerStreamHandler = method.handler  # type: ignore[assignment]
        responses = streaming(request, context)
        try:
            async for response in responses:
                await send(response)
        finally:
            aclose = getattr(responses, "aclose", None)
            if aclose is not None:
                with trio.CancelScope(shield=True):
                    await aclose()
    else:
        bidi: BidiHandler = method.handler  # type: ignore[assignment]
        requests = _requests(stream, method, transport)
        async with contextlib.aclosing(requests):
            await bidi(requests, send, context)


async def run_call(
    stream: CallStream,
    method: Method,
    context: CallContext,
    transport: CallTransport,
    path: str,
) -> None:
    """Run the handler and end the stream with its status; nothing is sent after a reset."""
    status, message = StatusCode.OK, ""
    with stream.scope:
        try:
            await _dispatch(stream, method, context, transport)
        except GrpcError as exc:
            status, message = exc.status, exc.message
        except WireError as exc:
            status, message = StatusCode(exc.status), exc.message
        except TransportClosedError:
            raise
        except Exception:
            log.exception("grpc_handler_failed", path=path, stream_id=stream.stream_id)
            status, message = StatusCode.INTERNAL, "the handler failed"
    if stream.reset:
        return
    if stream.scope.cancelled_caught:
        if math.isfinite(stream.deadline) and trio.current_time() >= stream.deadline:
            status, message = StatusCode.DEADLINE_EXCEEDED, "deadline exceeded"
        else:
            status, message = StatusCode.CANCELLED, "cancelled"
    await transport.send_trailers(stream, status, message)
