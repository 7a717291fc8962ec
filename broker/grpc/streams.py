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
from typing import Protocol

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
    ServerStreamHandler,
    StatusCode,
    UnaryHandler,
)
from protocol.grpc_wire import MessageDecoder, WireError

log = structlog.get_logger()


class TransportClosedError(Exception):
    """The connection under a call is gone: the call ends without an answer."""


class CallTransport(Protocol):
    """What a call needs of its connection."""

    async def send_message(self, stream: CallStream, payload: bytes) -> None: ...

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

    def on_data(self, data: bytes, flow_length: int) -> int:
        """DATA arrived; the bytes to hand back to flow control at once."""
        self._held += flow_length
        if self.error is None:
            try:
                self._messages.extend(self.decoder.feed(data))
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
        await send(await unary(request, context))
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
