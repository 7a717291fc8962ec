"""One client connection: frames in, requests processed concurrently, responses out.

The read loop decodes frames (`protocol.FrameDecoder`). The requests of one receive whose
processor can take them without a task (`Dispatcher.submit_burst`: sends, handed to the store
together with one completion callback) are run right there; any other starts one task. Answers
leave in completion order, matched by opaque: each is encoded into the connection's outbox and
a single writer task, woken at most once per batch, joins the queued frames into one write (on
a plain TCP socket straight to the descriptor while it has room, else `send_all`). At most
`max_inflight_per_connection` requests run at once: past it the read loop stops reading, so TCP
pushes back on the client and memory stays bounded. A `RemotingProtocolError` (garbage on the
wire) ends the read loop after one `protocol_error` event, once the whole frames received before
the garbage are dispatched; requests already running still finish and are answered.
An idle connection (nothing received, nothing running) is closed after `idle_timeout_s` by a
watchdog that reads the time of the last receive, so no receive pays for a cancel scope. Knows
nothing of what the requests mean: `Dispatcher` maps codes to processors.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
from collections.abc import Callable, Sequence
from typing import Final

import structlog
import trio

from broker.acl.validator import AccessValidator, shared_validator
from broker.client_calls import ClientCalls
from broker.config import BrokerConfig
from broker.context import BrokerContext
from broker.dispatcher import Dispatcher
from broker.processors import RequestContext
from broker.tls import TlsHandshakeError, start_tls
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.errors import RemotingProtocolError
from protocol.frame import FrameDecoder, FramesBeforeError, encode_frame
from store.parking import ParkingSpot

RECEIVE_SIZE: Final = 256 * 1024
#: the writer joins queued frames up to about this many bytes per send_all
MAX_COALESCE_BYTES: Final = 1024 * 1024
#: frames queued for a peer past which the broker's own requests to it are dropped
MAX_PUSHED_FRAMES: Final = 1024

log = structlog.get_logger()
_conn_ids = itertools.count(1)


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
        #: requests of the broker's own waiting for this peer's answer
        self.calls = ClientCalls(self.push)
        self.ctx = RequestContext(broker, self.conn_id, remote, self.push, self.calls.ask)
        self.inflight = 0
        self.requests = 0
        self.close_reason = "peer_closed"
        self._max_inflight = config.max_inflight_per_connection
        # The read loop parks here when `max_inflight` requests are running.
        self._slot_spot = ParkingSpot()
        self._read_scope = trio.CancelScope()
        self._last_receive = 0.0
        # Bytes of the frame being received, and since when (None: no partial frame).
        self._buffered = 0
        self._partial_since: float | None = None
        # Encoded responses waiting for the writer, and the writer when it is parked.
        self._outbox: list[bytes] = []
        self._writer_spot = ParkingSpot()
        self._reading_done = False
        self._write_failed = False
        #: called once reading has stopped (the peer closed, reset or stopped taking our
        #: writes; shutdown; a timeout), while held requests may still run: nothing more can
        #: come in on this connection, so what it registered can go now
        self.on_reading_done: Callable[[], None] = lambda: None
        #: the descriptor of a plain TCP connection, written directly when it has room
        self._fd = -1
        # Security hook (broker/acl): every request is checked before dispatch when ACL is on.
        self.access: AccessValidator | None = (
            shared_validator(config.acl_file) if config.acl_enable else None
        )

    def push(self, command: RemotingCommand) -> bool:
        """Queue a request of the broker's own for the peer (oneway); False when the connection
        is closing or holds `MAX_PUSHED_FRAMES` unsent frames already."""
        if self._write_failed or self._reading_done or len(self._outbox) >= MAX_PUSHED_FRAMES:
            return False
        self._outbox.append(encode_frame(command))
        self._wake_writer()
        return True

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
        if isinstance(self.stream, trio.SocketStream):
            self._fd = self.stream.socket.fileno()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._writer)
            watchdog = trio.CancelScope()
            nursery.start_soon(self._idle_watchdog, watchdog)
            try:
                with self._read_scope:
                    await self._read_loop(nursery)
            finally:
                watchdog.cancel()
                self._reading_done = True
                try:
                    self.on_reading_done()
                except Exception:
                    log.exception("reading_done_hook_failed")
                self.calls.close()
                self._wake_writer()

    async def _idle_watchdog(self, scope: trio.CancelScope) -> None:
        """Stop reading once nothing was received for `idle_timeout_s` and nothing runs, or
        once a frame has been arriving for `idle_timeout_s` without being whole (a trickle)."""
        idle_s = self.config.idle_timeout_s
        with scope:
            self._last_receive = trio.current_time()
            while True:
                partial = self._partial_since
                deadline = self._last_receive + idle_s
                await trio.sleep_until(
                    deadline if partial is None else min(deadline, partial + idle_s)
                )
                partial = self._partial_since
                if partial is not None and trio.current_time() - partial >= idle_s:
                    log.info("frame_timeout", buffered=self._buffered, idle_timeout_s=idle_s)
                    self.stop_reading("frame_timeout")
                    return
                if trio.current_time() - self._last_receive >= idle_s:
                    if self.inflight == 0:
                        self.stop_reading("idle_timeout")
                        return
                    self._last_receive = trio.current_time()  # busy: look again a period on

    async def _read_loop(self, nursery: trio.Nursery) -> None:
        try:
            await self._read_frames(nursery)
        finally:
            self.ctx.broker.read_budget.release(self.conn_id)

    async def _read_frames(self, nursery: trio.Nursery) -> None:
        decoder = FrameDecoder(max_frame_length=self.config.max_frame_length)
        stream = self.stream
        dispatcher = self.dispatcher
        ctx = self.ctx
        respond = self._respond
        max_inflight = self._max_inflight
        current_time = trio.current_time
        budget = self.ctx.broker.read_budget
        inline = dispatcher.inline
        while True:
            try:
                data = await stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.close_reason = "peer_reset"  # RST or a socket error: like a close
                return
            self._last_receive = current_time()
            if not data:
                return
            error: RemotingProtocolError | None = None
            commands: Sequence[RemotingCommand]
            try:
                # a bytearray from some streams: the decoder copies bodies out of it
                commands = decoder.feed(data)
            except RemotingProtocolError as exc:
                # The frames before the bad bytes are whole requests: they run and are answered
                # (the writer flushes before the connection closes); nothing after them is read.
                error, commands = exc, exc.decoded if isinstance(exc, FramesBeforeError) else ()
            buffered = decoder.buffered
            if buffered and commands:
                # A frame completed and the next one began in this data: a busy client whose
                # writes end mid-frame, not a trickle; its partial frame is timed from now.
                self._partial_since = self._last_receive
            if buffered != self._buffered:
                # A partial frame is held: counted in the budget, and timed against a trickle.
                if not buffered:
                    self._partial_since = None
                elif not self._buffered:
                    self._partial_since = self._last_receive
                self._buffered = buffered
                budget.update(self.conn_id, buffered, self.stop_reading)
            # The inline requests of this receive go to their processors together.
            burst: list[RemotingCommand] = []
            for command in commands:
                if command.is_response:
                    if not self.calls.on_response(command):
                        log.info("unexpected_response", opaque=command.opaque, code=command.code)
                    continue
                # No checkpoint per frame: a burst of frames is taken together.
                if self.inflight >= max_inflight:
                    self._submit_burst(burst, nursery)
                    burst = []
                    while self.inflight >= max_inflight:
                        await self._slot_spot.park()  # past the in-flight limit: stop reading
                self.inflight += 1
                self.requests += 1
                header_error = command.header_error
                if header_error is not None:  # a field of the wrong type: answered, not run
                    respond(
                        command,
                        command.make_response(header_error.response_code, str(header_error)),
                    )
                    continue
                if self.access is not None:
                    refusal = self.access.check(command, ctx.remote)
                    if refusal is not None:
                        self._answer(command, refusal)  # the validator logged it
                        continue
                if command.code in inline:
                    burst.append(command)
                else:
                    nursery.start_soon(self._handle, command)
            if burst:
                self._submit_burst(burst, nursery)
            if error is not None:
                log.warning("protocol_error", error=str(error), requests=self.requests)
                self.close_reason = "protocol_error"
                return

    def _submit_burst(self, burst: list[RemotingCommand], nursery: trio.Nursery) -> None:
        if burst:
            for declined in self.dispatcher.submit_burst(burst, self.ctx, self._respond):
                nursery.start_soon(self._handle, declined)

    async def _handle(self, request: RemotingCommand) -> None:
        response = None
        try:
            response = await self.dispatcher.dispatch(request, self.ctx)
        finally:
            self._respond(request, response)

    def _respond(self, request: RemotingCommand, response: RemotingCommand | bytes | None) -> None:
        """Log a refusal (an error code), then `_answer`; never raises. A response given as its
        encoded frame is a SUCCESS answer, queued as it is."""
        if isinstance(response, bytes):
            self._answer(request, response)
            return
        if response is not None and response.code:
            try:
                self.dispatcher.refusals.refused(
                    self.ctx.remote, request.code, response.code, response.remark
                )
            except Exception:
                log.exception("refusal_log_failed")
        self._answer(request, response)

    def _answer(self, request: RemotingCommand, response: RemotingCommand | bytes | None) -> None:
        """Queue `response` (a command, or its encoded frame) for the writer and free the
        request's slot; never raises."""
        try:
            if response is not None and not request.is_oneway and not self._write_failed:
                self._outbox.append(
                    response if isinstance(response, bytes) else encode_frame(response)
                )
        except Exception:
            log.exception("response_encode_failed", code=RequestCode.name_of(request.code))
        finally:
            self.inflight -= 1
            self._slot_spot.wake()
            self._writer_spot.wake()

    def _wake_writer(self) -> None:
        self._writer_spot.wake()

    async def _writer(self) -> None:
        """Send queued frames, joined up to about `MAX_COALESCE_BYTES` per `send_all`, until
        reading has stopped and every request is answered."""
        while True:
            outbox = self._outbox
            if not outbox:
                if self._reading_done and self.inflight == 0:
                    return
                await self._writer_spot.park()
                continue
            if self._write_failed:
                outbox.clear()  # the socket is dead: answers are dropped
                continue
            data = self._take_frames(outbox)
            if self._fd >= 0:
                # A plain TCP socket with room in its buffer takes the data at once: written
                # here, without the scheduler round trips and the timeout scope of `send_all`.
                try:
                    sent = os.write(self._fd, data)
                except BlockingIOError:
                    sent = 0
                except OSError as exc:  # EPIPE, ECONNRESET...: the peer is gone
                    self._fail_writes(type(exc).__name__)
                    continue
                if sent == len(data):
                    continue
                data = data[sent:]
            try:
                with trio.fail_after(self.config.write_timeout_s):
                    await self.stream.send_all(data)
            except (
                trio.BrokenResourceError,
                trio.ClosedResourceError,
                trio.TooSlowError,
            ) as error:
                self._fail_writes(type(error).__name__)

    def _fail_writes(self, error: str) -> None:
        self._write_failed = True
        log.info("write_failed", error=error)
        self.stop_reading("write_failed")

    def _take_frames(self, outbox: list[bytes]) -> bytes:
        if len(outbox) == 1:
            return outbox.pop()
        count = size = 0
        while count < len(outbox) and size < MAX_COALESCE_BYTES:
            size += len(outbox[count])
            count += 1
        data = b"".join(outbox[:count])
        del outbox[:count]
        return data
