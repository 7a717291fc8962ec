"""The standalone name server's wiring: listeners, connections, the expiry scan, shutdown.

`serve(config)` loads the KV config, binds the listeners (port 0 allowed), starts the scan that
expires brokers every `scan_interval_s`, and serves connections until `NamesrvServer.shutdown()`;
it reports the running server through `task_status` (`server = await nursery.start(serve, c)`).
A connection reads frames (`protocol.FrameDecoder`) and answers each request in turn: every
request is an in-memory table operation or a small file write, so one at a time per connection
keeps answers in order and memory bounded by one frame. Every answer with an error code goes
to the `refusals` recorder the caller passes (the CLI's is rate limited). When a connection
closes, the brokers whose last registration came on it leave the routes (4.9's
`BrokerHousekeepingService`). A connection that sent nothing for `idle_timeout_s` is closed
(4.9's channel idle time); garbage on the wire closes it after the whole frames before it are
answered. Shutdown: stop accepting, stop reading, let running requests finish within
`shutdown_timeout_s`. Signals are the CLI's.
"""

from __future__ import annotations

import errno
import itertools
from collections.abc import Callable
from typing import Final

import structlog
import trio

from namesrv.config import NamesrvConfig
from namesrv.kvconfig import KVConfigManager
from namesrv.processor import DefaultRequestProcessor, Peer
from namesrv.routeinfo import RouteInfoManager
from protocol.command import RemotingCommand
from protocol.errors import RemotingProtocolError
from protocol.frame import FrameDecoder, FramesBeforeError, encode_frame

log = structlog.get_logger()

RECEIVE_SIZE: Final = 64 * 1024
#: accept errors that mean "out of a resource for now": the connection stays in the backlog
ACCEPT_CAPACITY_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_RETRY_S: Final = 0.1
_conn_ids = itertools.count(1)

#: (peer (ip, port), request code, response code, remark) -> whether it was logged; the
#: broker's `RefusalLog.refused` fits (it rate-limits, so a peer cannot flood the log)
RecordRefusal = Callable[[tuple[str, int], int, int, str | None], object]


def peer_address(stream: trio.SocketStream) -> tuple[str, int]:
    """(ip, port) of the peer; ("?", 0) once the socket is gone."""
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        return ("?", 0)
    return str(host), int(port)


class _Reading:
    """A connection's read side: the scope of the receive under way, and the stop switch."""

    __slots__ = ("scope", "stopped")

    def __init__(self) -> None:
        self.scope = trio.CancelScope()
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True
        self.scope.cancel()


class NamesrvServer:
    """A running name server: its tables, bound addresses, connections, shutdown switch."""

    def __init__(
        self,
        config: NamesrvConfig,
        routes: RouteInfoManager,
        kv: KVConfigManager,
        refusals: RecordRefusal | None = None,
    ) -> None:
        self.config = config
        #: told of every answer with an error code (the CLI passes a rate-limited log)
        self.refusals = refusals
        self.routes = routes
        self.kv = kv
        self.processor = DefaultRequestProcessor(config, routes, kv)
        #: (host, port) actually bound, per listener
        self.addresses: list[tuple[str, int]] = []
        self.connections: dict[int, _Reading] = {}
        self._refusing = False
        self._shutdown = trio.Event()
        self._all_closed = trio.Event()
        self._draining = False

    @property
    def port(self) -> int:
        return self.addresses[0][1]

    def shutdown(self) -> None:
        """Begin a graceful shutdown; `serve` returns once it is complete. Idempotent."""
        self._shutdown.set()

    async def accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        """Accept for ever; out of descriptors or memory, retry every `ACCEPT_RETRY_S` with
        one `accept_failed` event per spell."""
        failed = 0
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                    raise
                if not failed:
                    log.warning("accept_failed", error=errno.errorcode.get(exc.errno or 0, "?"))
                failed += 1
                await trio.sleep(ACCEPT_RETRY_S)
                continue
            if failed:
                log.info("accept_resumed", attempts=failed)
                failed = 0
            nursery.start_soon(self.handle, stream)

    async def handle(self, stream: trio.SocketStream) -> None:
        """Serve one connection to its end; never raises."""
        address = peer_address(stream)
        host, port = address
        remote = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if len(self.connections) >= self.config.max_connections or self._draining:
            if not self._refusing:
                reason = "shutdown" if self._draining else "max_connections"
                log.warning(
                    "connection_refused",
                    remote=remote,
                    reason=reason,
                    limit=self.config.max_connections,
                )
            self._refusing = True
            await trio.aclose_forcefully(stream)
            return
        self._refusing = False
        peer = Peer(next(_conn_ids), remote, address)
        reading = _Reading()
        self.connections[peer.conn_id] = reading
        with structlog.contextvars.bound_contextvars(conn_id=peer.conn_id, remote=remote):
            log.debug("connection_opened")
            reason = "peer_closed"
            try:
                reason = await self._serve(stream, peer, reading)
            except Exception:
                # One connection's failure must not reach the nursery and stop the server.
                log.exception("connection_failed")
                reason = "failed"
            finally:
                del self.connections[peer.conn_id]
                self.routes.on_connection_closed(peer.conn_id)
                if self._draining and not self.connections:
                    self._all_closed.set()
                await trio.aclose_forcefully(stream)
                log.debug("connection_closed", reason=reason)

    async def _serve(self, stream: trio.SocketStream, peer: Peer, reading: _Reading) -> str:
        """Read and answer until the peer closes, goes idle, sends garbage or shutdown; why."""
        decoder = FrameDecoder(max_frame_length=self.config.max_frame_length)
        while True:
            if reading.stopped:
                return "shutdown"
            data = b""
            # A new scope per receive: shutdown cancels the receive, never a running request.
            with trio.move_on_after(self.config.idle_timeout_s) as reading.scope:
                try:
                    data = await stream.receive_some(RECEIVE_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return "peer_reset"
            if reading.scope.cancelled_caught:
                return "shutdown" if reading.stopped else "idle_timeout"
            if not data:
                return "peer_closed"
            error: RemotingProtocolError | None = None
            try:
                commands = decoder.feed(data)
            except RemotingProtocolError as exc:
                error = exc
                commands = list(exc.decoded) if isinstance(exc, FramesBeforeError) else []
            for command in commands:
                if not command.is_response and not await self._answer(stream, command, peer):
                    return "write_failed"
            if error is not None:
                log.warning("protocol_error", error=str(error))
                return "protocol_error"

    async def _answer(
        self, stream: trio.SocketStream, request: RemotingCommand, peer: Peer
    ) -> bool:
        response = await self.processor.process(request, peer)
        if response.code and self.refusals is not None:
            self.refusals(peer.address, request.code, response.code, response.remark)
        if request.is_oneway:
            return True
        try:
            with trio.fail_after(self.config.write_timeout_s):
                await stream.send_all(encode_frame(response))
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError) as exc:
            log.info("write_failed", error=type(exc).__name__)
            return False
        return True

    async def scan_loop(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Expire brokers every `scan_interval_s` (4.9's `scanNotActiveBroker`)."""
        task_status.started()
        while True:
            await trio.sleep(self.config.scan_interval_s)
            self.routes.scan_not_active_broker()

    async def drain(self) -> bool:
        """Stop reading on every connection; wait for running requests. False on timeout."""
        self._draining = True
        for reading in self.connections.values():
            reading.stop()
        if not self.connections:
            return True
        with trio.move_on_after(self.config.shutdown_timeout_s):
            await self._all_closed.wait()
            return True
        return False


async def serve(
    config: NamesrvConfig,
    *,
    refusals: RecordRefusal | None = None,
    task_status: trio.TaskStatus[NamesrvServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the name server until `NamesrvServer.shutdown()`; report it once it accepts.
    `refusals` is told of every request answered with an error code.

    Raises `KVConfigError` for an unusable KV config file, OSError when the listen address
    cannot be bound.
    """
    kv = KVConfigManager(config.kv_config_path, max_entries=config.max_kv_entries)
    kv.load()
    routes = RouteInfoManager(
        broker_expired_s=config.broker_expired_s,
        max_brokers=config.max_brokers,
        clock=trio.current_time,
    )
    host = None if config.listen_host in ("", "*", "0.0.0.0") else config.listen_host
    listeners = await trio.open_tcp_listeners(config.listen_port, host=host)
    server = NamesrvServer(config, routes, kv, refusals)
    server.addresses = [tuple(lst.socket.getsockname()[:2]) for lst in listeners]
    async with trio.open_nursery() as connections:
        await connections.start(server.scan_loop)
        async with trio.open_nursery() as accepting:
            for listener in listeners:
                accepting.start_soon(server.accept_loop, listener, connections)
            for bound_host, port in server.addresses:
                log.info("listening", host=bound_host, port=port, role="namesrv")
            task_status.started(server)
            await server._shutdown.wait()
            log.info("shutdown", connections=len(server.connections))
            accepting.cancel_scope.cancel()
        for listener in listeners:
            await listener.aclose()
        if not await server.drain():
            log.warning("shutdown_deadline_passed", connections=len(server.connections))
        connections.cancel_scope.cancel()
    log.info("shutdown_complete")
