"""One HTTP/2 connection carrying gRPC calls: the h2 state machine, driven by one task.

The connection task reads the socket, feeds h2 and acts on its events: a request's headers are
checked and its call started in a task of the connection's nursery (`streams.run_call`), DATA
goes to the call's `CallStream`, RST_STREAM cancels the call. Calls write through `send_message`
and `send_trailers`, which respect the peer's flow-control windows (they wait for WINDOW_UPDATE,
never buffer beyond one frame) and share one write lock, so frames leave whole and in order.

A peer that breaks HTTP/2 (bad preface, garbage, oversized headers, more streams than
SETTINGS_MAX_CONCURRENT_STREAMS, a storm of RST_STREAMs) gets a GOAWAY and the connection ends;
the caller logs one event with the reason. Imported on the first gRPC connection (h2).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Final

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import structlog
import trio
from hyperframe.frame import GoAwayFrame

from broker.grpc.h2_server import ServerH2Connection
from broker.grpc.methods import CallContext, Method, MethodTable, StatusCode
from broker.grpc.streams import (
    RESPONSE_HEADERS,
    CallStream,
    ConnectionEndedError,
    RefusedError,
    parse_request,
    run_call,
    trailers_of,
)
from protocol import grpc_wire
from protocol.grpc_wire import MessageDecoder

if TYPE_CHECKING:
    from broker.grpc.methods import GrpcSettings
    from broker.read_budget import ReadBudget

log = structlog.get_logger()

READ_SIZE: Final = 64 * 1024
#: RST_STREAMs a peer may send per `RESET_WINDOW_S` before the connection is closed
MAX_RESETS: Final = 1000
RESET_WINDOW_S: Final = 10.0


class GrpcConnection:
    def __init__(
        self,
        stream: trio.abc.Stream,
        conn_id: int,
        peer: str,
        settings: GrpcSettings,
        methods: MethodTable,
        *,
        tls: bool,
        budget: ReadBudget | None = None,
    ) -> None:
        self._socket = stream
        self.conn_id = conn_id
        self.peer = peer
        self.settings = settings
        self.methods = methods
        self.tls = tls
        config = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        self.h2: h2.connection.H2Connection = ServerH2Connection(config)
        self.streams: dict[int, CallStream] = {}
        self.calls = 0
        #: the last stream id served after a GOAWAY; later ones are refused
        self.goaway_at: int | None = None
        self._write_lock = trio.Lock()
        self._resets: list[float] = []
        self._nursery: trio.Nursery | None = None
        self._idle = trio.Event()
        #: why the connection ended, when a call's write found it broken
        self._ended: ConnectionEndedError | None = None
        #: the broker's bound on bytes held in partial messages, shared with the remoting port
        self._budget = budget
        self._over_budget = False
        self._reading = trio.CancelScope()
        self._last_active = trio.current_time()
        self._idle_out = False
        #: the peer sent GOAWAY(NO_ERROR): its calls in flight go on until it closes the socket
        self._peer_goaway = False

    # -- the connection task ----------------------------------------------------------------

    async def run(self) -> None:
        """Serve until the peer closes or breaks the protocol (`ConnectionEndedError`)."""
        s = self.settings
        self.h2.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: s.max_concurrent_streams,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: s.max_header_list_size,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: s.stream_window,
            },
        )
        # h2 applies its own 64 KiB limit until a SETTINGS change is acknowledged
        self.h2.decoder.max_header_list_size = s.max_header_list_size
        self.h2.initiate_connection()
        # the connection window is opened past the 64 KiB every connection starts with
        self.h2.increment_flow_control_window(s.connection_window - 65_535)
        await self.flush()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                nursery.start_soon(self._watch_idle)
                with self._reading:
                    await self._read_loop()
                if self._over_budget:  # another connection's read found the budget exceeded
                    raise ConnectionEndedError("read_budget")
                if self._idle_out:
                    await self.goaway(h2.errors.ErrorCodes.NO_ERROR)
                    raise ConnectionEndedError("idle")
            except ConnectionEndedError as exc:
                self._ended = self._ended or exc
            finally:
                if self._budget is not None:
                    self._budget.release(-self.conn_id)
            nursery.cancel_scope.cancel()
        if self._ended is not None:
            raise self._ended

    async def _watch_idle(self) -> None:
        """End the reading once nothing was received and no call ran for `idle_timeout_s` (a
        read is never cancelled for this otherwise: a cancelled TLS read breaks the stream)."""
        idle_s = self.settings.idle_timeout_s
        while True:
            await trio.sleep_until(self._last_active + idle_s)
            if self.streams:
                self._last_active = trio.current_time()
            elif trio.current_time() >= self._last_active + idle_s:
                self._idle_out = True
                self._reading.cancel()
                return

    async def _read_loop(self) -> None:
        while True:
            try:
                data = await self._socket.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise ConnectionEndedError("peer_reset", type(exc).__name__) from None
            self._last_active = trio.current_time()
            if not data:
                if self.goaway_at is not None:
                    return
                raise ConnectionEndedError("peer_goaway" if self._peer_goaway else "peer_closed")
            try:
                events = self.h2.receive_data(data)
            except h2.exceptions.ProtocolError as exc:
                await self._flush_quietly()  # h2 queued a GOAWAY with the error code
                raise ConnectionEndedError("protocol_error", str(exc)) from None
            try:
                for event in events:
                    self._on_event(event)
                self._check_budget()
            except ConnectionEndedError:
                await self._flush_quietly()  # the GOAWAY saying why
                raise
            await self.flush()
            if self.goaway_at is not None and not self.streams:
                return

    def _on_event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            self._on_request(event)
        elif isinstance(event, h2.events.DataReceived):
            call = self.streams.get(event.stream_id)
            size = event.flow_controlled_length
            released = call.on_data(event.data, size) if call is not None else size
            if released:
                self._release(event.stream_id, released)
        elif isinstance(event, h2.events.StreamEnded):
            if (call := self.streams.get(event.stream_id)) is not None:
                call.on_end()
        elif isinstance(event, h2.events.StreamReset):
            self._on_reset(event.stream_id)
        elif isinstance(event, h2.events.WindowUpdated):
            self._wake_senders(event.stream_id)
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            self._wake_senders(0)
        elif isinstance(event, h2.events.ConnectionTerminated):
            if not event.error_code:  # its calls in flight finish (h2_server.py)
                self._peer_goaway = True
                return
            raise ConnectionEndedError("peer_goaway_error", f"error code {event.error_code}")

    def _check_budget(self) -> None:
        """Report the bytes held to the broker's read budget; past it, this connection may be
        the one closed (`read_budget`)."""
        if self._budget is None:
            return
        held = sum(call.buffered for call in self.streams.values())
        self._budget.update(-self.conn_id, held, self._stop_for_budget)  # apart from remoting ids
        if self._over_budget:
            self.h2.close_connection(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
            raise ConnectionEndedError("read_budget", f"{held} bytes held")

    def _stop_for_budget(self, reason: str) -> None:
        self._over_budget = True
        self._reading.cancel()

    def _on_reset(self, stream_id: int) -> None:
        now = trio.current_time()
        self._resets = [t for t in self._resets if now - t < RESET_WINDOW_S]
        self._resets.append(now)
        if (call := self.streams.get(stream_id)) is not None:
            call.on_reset()
        if len(self._resets) > MAX_RESETS:
            self.h2.close_connection(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
            raise ConnectionEndedError(
                "reset_flood", f"{len(self._resets)} in {RESET_WINDOW_S:g} s"
            )

    def _wake_senders(self, stream_id: int) -> None:
        if stream_id:
            if (call := self.streams.get(stream_id)) is not None:
                call.wake_sender()
            return
        for call in self.streams.values():
            call.wake_sender()

    def _release(self, stream_id: int, size: int) -> None:
        try:
            self.h2.acknowledge_received_data(size, stream_id)
        except (h2.exceptions.StreamClosedError, h2.exceptions.NoSuchStreamError):
            self.h2.increment_flow_control_window(size)  # the connection's share only

    # -- a request's headers ----------------------------------------------------------------

    def _on_request(self, event: h2.events.RequestReceived) -> None:
        stream_id = event.stream_id
        if self.goaway_at is not None and stream_id > self.goaway_at:
            self.h2.reset_stream(stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
            return
        headers = [(str(k), str(v)) for k, v in event.headers or ()]
        try:
            request = parse_request(headers, self.methods)
        except RefusedError as exc:
            self._refuse(event, exc.status, exc.message, exc.http_status)
            return
        deadline = trio.current_time() + request.timeout_s
        decoder = MessageDecoder(self.settings.max_message_size, request.encoding)
        call = self.streams[stream_id] = CallStream(stream_id, decoder, deadline)
        context = CallContext(self.conn_id, self.peer, request.metadata, deadline, self.tls)
        assert self._nursery is not None
        self.calls += 1
        self._nursery.start_soon(self._run_call, call, request.method, context, request.path)

    def _refuse(
        self,
        event: h2.events.RequestReceived,
        status: StatusCode,
        message: str,
        http_status: int = 200,
    ) -> None:
        """A trailers-only response ending the stream; the rest of the request is refused."""
        stream_id = event.stream_id
        log.info("grpc_call_refused", stream_id=stream_id, status=status.name, reason=message)
        try:
            trailers = trailers_of(status, message, http_status)
            self.h2.send_headers(stream_id, trailers, end_stream=True)
            if not self._remote_closed(stream_id):
                self.h2.reset_stream(stream_id, h2.errors.ErrorCodes.NO_ERROR)
        except h2.exceptions.StreamClosedError:
            pass  # the peer reset it in the same read

    def _remote_closed(self, stream_id: int) -> bool:
        """Whether the peer sent END_STREAM (h2 may be ahead of the events handled so far)."""
        stream = self.h2.streams.get(stream_id)
        return stream is None or stream.closed or stream.state_machine.state.name in _REMOTE_DONE

    async def _run_call(
        self, call: CallStream, method: Method, context: CallContext, path: str
    ) -> None:
        try:
            await run_call(call, method, context, self, path)
        except ConnectionEndedError as exc:
            self._ended = self._ended or exc
            assert self._nursery is not None
            self._nursery.cancel_scope.cancel()
        finally:
            self.streams.pop(call.stream_id, None)
            self._last_active = trio.current_time()
            if self.goaway_at is not None and not self.streams:
                self._idle.set()

    # -- writing ------------------------------------------------------------------------------

    async def flush(self) -> None:
        """Write what h2 has queued; `ConnectionEndedError` when the peer does not read in time."""
        async with self._write_lock:
            data = self.h2.data_to_send()
            if data:
                await self._write(data)

    async def _write(self, data: bytes) -> None:
        with trio.move_on_after(self.settings.write_timeout_s) as waited:
            try:
                await self._socket.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise ConnectionEndedError("peer_reset", type(exc).__name__) from None
        if waited.cancelled_caught:
            raise ConnectionEndedError("write_timeout")

    async def _flush_quietly(self) -> None:
        with contextlib.suppress(ConnectionEndedError):
            await self.flush()

    async def send_message(self, stream: CallStream, payload: bytes, *, last: bool = False) -> None:
        """Write one message; `last`: the trailers follow at once, and flush it with them."""
        if not stream.headers_sent:
            try:
                self.h2.send_headers(stream.stream_id, RESPONSE_HEADERS)
            except h2.exceptions.StreamClosedError:
                stream.on_reset()
                await trio.lowlevel.checkpoint()
                return
            except h2.exceptions.ProtocolError as exc:
                raise ConnectionEndedError("h2_state", str(exc)) from None
            stream.headers_sent = True
        data = memoryview(grpc_wire.encode_message(payload))
        while data:
            if stream.reset:
                await trio.lowlevel.checkpoint()  # the call's scope is cancelled: raises
                return
            window = min(
                self.h2.local_flow_control_window(stream.stream_id),
                self.h2.max_outbound_frame_size,
            )
            if window <= 0:
                woken = stream.window
                await self.flush()
                await woken.wait()
                continue
            try:
                self.h2.send_data(stream.stream_id, bytes(data[:window]))
            except h2.exceptions.StreamClosedError:
                stream.on_reset()  # reset in a read whose events are not handled yet
                await trio.lowlevel.checkpoint()
                return
            except h2.exceptions.ProtocolError as exc:
                raise ConnectionEndedError("h2_state", str(exc)) from None
            data = data[window:]
            if data or not last:
                await self.flush()

    async def send_trailers(self, stream: CallStream, status: int, message: str) -> None:
        if stream.reset:
            return
        http_status = None if stream.headers_sent else 200
        trailers = trailers_of(StatusCode(status), message, http_status)
        try:
            self.h2.send_headers(stream.stream_id, trailers, end_stream=True)
            if not self._remote_closed(stream.stream_id):  # it stops counting as open
                self.h2.reset_stream(stream.stream_id, h2.errors.ErrorCodes.NO_ERROR)
        except h2.exceptions.StreamClosedError:
            return
        except h2.exceptions.ProtocolError as exc:
            raise ConnectionEndedError("h2_state", str(exc)) from None
        await self.flush()

    async def acknowledge(self, stream: CallStream, size: int) -> None:
        self._release(stream.stream_id, size)
        await self.flush()

    # -- shutdown -------------------------------------------------------------------------------

    async def goaway(self, code: h2.errors.ErrorCodes = h2.errors.ErrorCodes.NO_ERROR) -> None:
        """Tell the peer that no stream after the last one received will be served; calls in
        flight go on (h2's own GOAWAY would close its state machine under them)."""
        if self.goaway_at is not None:
            return
        self.goaway_at = self.h2.highest_inbound_stream_id
        frame = GoAwayFrame(0)
        frame.last_stream_id = self.goaway_at
        frame.error_code = code
        async with self._write_lock:
            await self._write(self.h2.data_to_send() + frame.serialize())
        if not self.streams:
            self._idle.set()

    async def wait_calls_done(self) -> None:
        """Return once no call is in flight (after `goaway`)."""
        await self._idle.wait()


#: h2 stream states in which the peer has sent END_STREAM
_REMOTE_DONE: Final = frozenset({"HALF_CLOSED_REMOTE", "CLOSED"})
