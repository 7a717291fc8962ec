"""The gRPC endpoint's listener: accept loop, TLS, the connection budget and graceful shutdown.

`GrpcServer.run(listeners)` accepts connections until `shutdown(grace_s)`: then it stops
accepting, sends every connection a GOAWAY, gives the calls in flight `grace_s` seconds and
cancels what is left. Each connection is one `GrpcConnection` task; its failure, whatever the
peer sent, ends that connection with one `grpc_connection_closed` event and nothing else.

Plaintext is HTTP/2 with prior knowledge (h2c), what gRPC clients speak without TLS; TLS follows
the remoting port's settings (`tls_mode` disabled, permissive or enforcing, certificate, key,
client auth), offering ALPN "h2". h2, protobuf and the service's methods are imported when the
first connection arrives, so a broker no gRPC client talks to does not pay their memory.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Final

import structlog
import trio

from broker.accept import accept_forever
from broker.grpc.methods import GrpcSettings, MethodTable
from broker.tls import TlsHandshakeError, start_tls

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.context import BrokerContext
    from broker.grpc.connection import GrpcConnection
    from broker.read_budget import ReadBudget

log = structlog.get_logger()

_conn_ids = itertools.count(1)
#: how connections end when nobody did anything wrong (logged at debug level)
_ORDINARY_ENDS: Final = frozenset({"peer_closed", "peer_goaway", "goaway_done", "idle", "shutdown"})
#: ends after which the peer's remaining bytes are read (at most LINGER_BYTES, LINGER_S)
_LINGER_AFTER: Final = frozenset({"protocol_error", "reset_flood", "read_budget"})
LINGER_S: Final = 1.0
LINGER_BYTES: Final = 1 << 20


class GrpcServer:
    """Serves `methods()` (called once, at the first connection) on the listeners given to
    `run`. `room()` says whether one more connection fits the broker's connection budget."""

    def __init__(
        self,
        config: BrokerConfig,
        methods: Callable[[], MethodTable],
        room: Callable[[], bool] = lambda: True,
        settings: GrpcSettings | None = None,
        budget: ReadBudget | None = None,
    ) -> None:
        self.config = config
        self.settings = settings or GrpcSettings.from_config(config)
        self._methods_factory = methods
        self._methods: MethodTable | None = None
        self._room = room
        self._budget = budget
        self.connections: dict[int, GrpcConnection] = {}
        self.addresses: list[tuple[str, int]] = []
        self.refused_connections = 0
        self._refusing = False
        self._shutdown = trio.Event()
        self._grace_s = 0.0

    @property
    def port(self) -> int:
        return self.addresses[0][1]

    def shutdown(self, grace_s: float) -> None:
        """Stop accepting, GOAWAY, `grace_s` seconds for calls in flight; `run` then returns."""
        self._grace_s = grace_s
        self._shutdown.set()

    async def run(
        self,
        listeners: list[trio.SocketListener],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        self.addresses = [tuple(lsn.socket.getsockname()[:2]) for lsn in listeners]
        async with trio.open_nursery() as connections:
            async with trio.open_nursery() as accepting:
                for listener in listeners:
                    accepting.start_soon(
                        partial(
                            accept_forever,
                            connections=lambda: len(self.connections),
                            prefix="grpc_",
                        ),
                        listener,
                        self._accepted,
                        connections,
                    )
                for host, port in self.addresses:
                    log.info("grpc_listening", host=host, port=port)
                task_status.started()
                await self._shutdown.wait()
                accepting.cancel_scope.cancel()
            for listener in listeners:
                await listener.aclose()
            await self._drain(connections)

    async def _drain(self, connections: trio.Nursery) -> None:
        log.info("grpc_shutdown", connections=len(self.connections))
        with trio.move_on_after(self._grace_s) as waited:
            async with trio.open_nursery() as goaways:
                for connection in list(self.connections.values()):
                    goaways.start_soon(self._goaway, connection)
        if waited.cancelled_caught:
            calls = sum(len(c.streams) for c in self.connections.values())
            log.warning("grpc_shutdown_deadline_passed", calls=calls)
        connections.cancel_scope.cancel()

    @staticmethod
    async def _goaway(connection: GrpcConnection) -> None:
        from broker.grpc.streams import ConnectionEndedError

        try:
            await connection.goaway()
        except ConnectionEndedError:
            return
        await connection.wait_calls_done()

    def _open(self) -> int:
        return len(self.connections)

    async def _accepted(self, stream: trio.SocketStream) -> None:
        if not self._room():
            await self._refuse(stream)
            return
        self._refusing = False
        await self._handle(stream)

    async def _refuse(self, stream: trio.SocketStream) -> None:
        self.refused_connections += 1
        if not self._refusing:
            self._refusing = True
            log.warning("grpc_connection_refused", reason="max_connections")
        await trio.aclose_forcefully(stream)

    def _methods_table(self) -> MethodTable:
        if self._methods is None:
            self._methods = self._methods_factory()
        return self._methods

    async def _handle(self, socket: trio.SocketStream) -> None:
        conn_id = next(_conn_ids)
        peer = _peer(socket)
        with structlog.contextvars.bound_contextvars(grpc_conn_id=conn_id, remote=peer):
            try:
                stream = await start_tls(socket, self.config, alpn=("h2",))
            except TlsHandshakeError:
                await trio.aclose_forcefully(socket)
                return
            from broker.grpc.connection import GrpcConnection
            from broker.grpc.streams import ConnectionEndedError

            tls = isinstance(stream, trio.SSLStream)
            methods = self._methods_table()
            connection = GrpcConnection(
                stream, conn_id, peer, self.settings, methods, tls=tls, budget=self._budget
            )
            self.connections[conn_id] = connection
            reason, detail = "shutdown", ""
            try:
                await connection.run()
                reason = "goaway_done"
            except ConnectionEndedError as exc:
                reason, detail = exc.reason, exc.detail
            except Exception as exc:
                # one connection's failure never reaches the server's nursery
                log.exception("grpc_connection_failed")
                reason, detail = "internal_error", type(exc).__name__
            finally:
                del self.connections[conn_id]
                if reason in _LINGER_AFTER:
                    await _linger(stream)
                await trio.aclose_forcefully(stream)
                level = log.debug if reason in _ORDINARY_ENDS else log.info
                level(
                    "grpc_connection_closed", reason=reason, detail=detail, calls=connection.calls
                )


def broker_grpc_server(
    broker: BrokerContext, connection_count: Callable[[], int], listeners: list[trio.SocketListener]
) -> GrpcServer:
    """The broker's gRPC endpoint: `broker.grpc.service`'s methods, built at the first
    connection, and `max_connections` shared with the remoting port (`connection_count()`
    counts both)."""
    config = broker.config
    host, port = listeners[0].socket.getsockname()[:2]
    if host in ("0.0.0.0", "::"):
        host = config.store_host_ip
    endpoint = (str(host), int(port))

    def methods() -> MethodTable:
        from broker.grpc import service

        return service.methods(broker, endpoint)

    def room() -> bool:
        return connection_count() < config.max_connections

    return GrpcServer(config, methods, room, budget=broker.read_budget)


async def _linger(stream: trio.abc.Stream) -> None:
    """Half-close and read what the peer still sends, briefly: closing with its bytes unread
    would reset the connection, and the peer could lose the GOAWAY that says why."""
    with trio.move_on_after(LINGER_S):
        try:
            if isinstance(stream, trio.SocketStream):
                await stream.send_eof()
            received = 0
            while received < LINGER_BYTES and (data := await stream.receive_some(65536)):
                received += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        return "?"
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
