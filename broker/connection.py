"""One client connection: frames in, requests processed concurrently, responses out.

The read loop decodes frames (`protocol.FrameDecoder`) and starts one task per request; answers
leave in completion order, matched by opaque. A single writer task owns the socket's send side
and coalesces queued frames into one `send_all`. At most `max_inflight_per_connection` requests
run at once: past it the read loop stops reading, so TCP pushes back on the client and memory
stays bounded. A `RemotingProtocolError` (garbage on the wire) ends the read loop after one
`protocol_error` event; requests already running still finish. An idle connection (nothing
received, nothing running) is closed after `idle_timeout_s`. Knows nothing of what the requests
mean: `Dispatcher` maps codes to processors.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Mapping
from typing import Final, cast

import structlog
import trio

from broker.acl.validator import AccessValidator, shared_validator
from broker.config import BrokerConfig
from broker.context import BrokerContext
from broker.processors import RequestContext, RequestProcessor
from broker.refusals import RefusalLog
from broker.tls import TlsHandshakeError, start_tls
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import HeaderFieldError, RemotingProtocolError
from protocol.frame import FrameDecoder, encode_frame

RECEIVE_SIZE: Final = 256 * 1024
#: the writer joins queued frames up to about this many bytes per send_all
MAX_COALESCE_BYTES: Final = 1024 * 1024

log = structlog.get_logger()
_conn_ids = itertools.count(1)


class Dispatcher:
    """Request code -> processor; unknown codes and processor failures become responses.

    Every refusal (a response with an error code) is logged once through `RefusalLog`.
    """

    def __init__(self, processors: Mapping[int, RequestProcessor]) -> None:
        self.processors = dict(processors)
        self.refusals = RefusalLog()

    async def dispatch(
        self, request: RemotingCommand, ctx: RequestContext
    ) -> RemotingCommand | None:
        processor = self.processors.get(request.code)
        response: RemotingCommand | None
        if processor is None:
            response = request.make_response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f" request type {request.code} not supported",
            )
        else:
            try:
                response = await processor.process(request, ctx)
            except HeaderFieldError as exc:
                response = request.make_response(exc.response_code, str(exc))
            except Exception as exc:
                log.exception("processor_failed", code=RequestCode.name_of(request.code))
                return request.make_response(ResponseCode.SYSTEM_ERROR, str(exc) or repr(exc))
        if response is not None and response.code != ResponseCode.SUCCESS:
            self.refusals.refused(ctx.remote, request.code, response.code, response.remark)
        return response


def peer_address(stream: trio.SocketStream) -> tuple[str, int]:
    """(ip, port) of the peer; an IPv4-mapped IPv6 address is given as IPv4."""
    try:
        sockname = stream.socket.getpeername()
    except OSError:
        return ("0.0.0.0", 0)
    ip, port = str(sockname[0]), int(sockname[1])
    address = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        ip = str(address.ipv4_mapped)
    return ip, port


class Connection:
    """The state of one connection; `run()` returns when it is finished."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        remote: tuple[str, int],
        broker: BrokerContext,
        dispatcher: Dispatcher,
    ) -> None:
        config: BrokerConfig = broker.config
        self.stream = stream
        self.dispatcher = dispatcher
        self.config = config
        self.conn_id = next(_conn_ids)
        self.ctx = RequestContext(broker, self.conn_id, remote)
        self.inflight = 0
        self.requests = 0
        self.close_reason = "peer_closed"
        self._slots = trio.Semaphore(config.max_inflight_per_connection)
        self._read_scope = trio.CancelScope()
        # Security hook (broker/acl): every request is checked before dispatch when ACL is on.
        self.access: AccessValidator | None = (
            shared_validator(config.acl_file) if config.acl_enable else None
        )

    def stop_reading(self, reason: str) -> None:
        """Stop taking new requests (shutdown, write failure); running ones still finish."""
        if not self._read_scope.cancel_called:
            self.close_reason = reason
        self._read_scope.cancel()

    async def run(self) -> None:
        try:
            # Security hook (broker/tls): TLS, plaintext or refusal, as tls_mode says.
            self.stream = await start_tls(self.stream, self.config)
        except TlsHandshakeError as exc:
            self.close_reason = exc.reason
            return
        send, receive = trio.open_memory_channel[bytes](self.config.max_inflight_per_connection)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._writer, receive)
            async with send:
                with self._read_scope:
                    await self._read_loop(nursery, send)

    async def _read_loop(self, nursery: trio.Nursery, send: trio.MemorySendChannel[bytes]) -> None:
        decoder = FrameDecoder(max_frame_length=self.config.max_frame_length)
        idle_s = self.config.idle_timeout_s
        while True:
            try:
                with trio.move_on_after(idle_s) as idle:
                    data = await self.stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.close_reason = "peer_reset"  # RST or a socket error: like a close
                return
            if idle.cancelled_caught:
                if self.inflight == 0:
                    self.close_reason = "idle_timeout"
                    return
                continue
            if not data:
                return
            try:
                # The decoder copes with bytearrays too (it copies bodies out of them).
                commands = decoder.feed(cast(bytes, data))
            except RemotingProtocolError as exc:
                log.warning("protocol_error", error=str(exc), requests=self.requests)
                self.close_reason = "protocol_error"
                return
            for command in commands:
                if command.is_response:
                    log.info("unexpected_response", opaque=command.opaque, code=command.code)
                    continue
                try:
                    # No checkpoint per frame: a burst of frames starts its tasks together.
                    self._slots.acquire_nowait()
                except trio.WouldBlock:
                    await self._slots.acquire()  # past the in-flight limit: stop reading here
                self.inflight += 1
                self.requests += 1
                nursery.start_soon(self._handle, command, send.clone())

    async def _handle(self, request: RemotingCommand, send: trio.MemorySendChannel[bytes]) -> None:
        async with send:
            try:
                response = None
                if self.access is not None:
                    response = self.access.check(request, self.ctx.remote)
                if response is None:
                    response = await self.dispatcher.dispatch(request, self.ctx)
                if response is not None and not request.is_oneway:
                    # Never blocks: the channel holds one frame per in-flight request.
                    await send.send(encode_frame(response))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the writer is gone (socket failed); the request itself was processed
            finally:
                self.inflight -= 1
                self._slots.release()

    async def _writer(self, receive: trio.MemoryReceiveChannel[bytes]) -> None:
        broken = False
        async with receive:
            async for frame in receive:
                if broken:
                    continue  # keep draining so request tasks never wait on a dead socket
                frames = [frame]
                size = len(frame)
                while size < MAX_COALESCE_BYTES:
                    try:
                        more = receive.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    frames.append(more)
                    size += len(more)
                try:
                    with trio.fail_after(self.config.write_timeout_s):
                        await self.stream.send_all(b"".join(frames) if len(frames) > 1 else frame)
                except (
                    trio.BrokenResourceError,
                    trio.ClosedResourceError,
                    trio.TooSlowError,
                ) as exc:
                    broken = True
                    log.info("write_failed", error=type(exc).__name__)
                    self.stop_reading("write_failed")
