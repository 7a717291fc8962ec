"""The daemon's wiring: listeners, the store, the processor table and graceful shutdown.

`serve(config)` binds the listeners (IPv4 or IPv6, port 0 allowed), opens the store, builds
the shared `BrokerContext` and serves connections until `BrokerServer.shutdown()` is called;
it reports the running `BrokerServer` through `task_status`, so callers do
`server = await nursery.start(serve, config)`. Shutdown: stop accepting, stop reading new
requests, let running requests finish within `shutdown_timeout_s`, then close the store (final
flush, checkpoint, abort file removed). Signals are the CLI's business.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping
from functools import partial
from pathlib import Path

import structlog
import trio

from broker.accept import accept_forever
from broker.admin import registry as admin_registry
from broker.config import BrokerConfig, HostPort
from broker.connection import Connection, peer_address
from broker.consumer_offsets import ConsumerOffsetManager
from broker.context import BrokerContext
from broker.dispatcher import Dispatcher
from broker.grpc.server import GrpcServer, broker_grpc_server
from broker.ha.service import HAService
from broker.metrics import BrokerMetrics
from broker.pop import order_attempts
from broker.pop.order_attempts import ORDER_ATTEMPTS_FILE, OrderAttemptsFile
from broker.pop.revive import Reviver
from broker.pop.service import PopService
from broker.processor_table import broker_processors, namesrv_processors
from broker.processors import RequestProcessor
from broker.read_budget import ReadBudget
from broker.rebalance_lock import RebalanceLockManager
from broker.registration import Registration
from broker.resources import bind_error, raise_open_files_limit
from broker.schedule import ScheduleMessageService
from broker.store_metrics import serving_metrics, timed_flusher
from broker.subscription_group import SubscriptionGroupManager
from broker.tls import check_security_files
from broker.topic_config import TopicConfigManager
from broker.transaction import TransactionService
from store.config import BrokerRole
from store.message_store import DefaultMessageStore

log = structlog.get_logger()

#: accept errors that mean "out of a resource for now": the connection stays in the backlog


class BrokerServer:
    """A running broker: its bound addresses, its connections and the shutdown switch."""

    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        #: (host, port) actually bound, per listener
        self.addresses: list[tuple[str, int]] = []
        self.namesrv_addresses: list[tuple[str, int]] = []
        self.connections: set[Connection] = set()
        self.refused_connections = 0
        #: the port of /metrics and the dashboard, when `metrics_listen` is set
        self.http_port: int | None = None
        #: the registration with `namesrv_addr`'s name servers, when it is set
        self.registration: Registration | None = None
        #: the RocketMQ 5 gRPC endpoint, when `grpc_listen` is set
        self.grpc: GrpcServer | None = None
        self._refusing = False
        self._shutdown = trio.Event()
        self._all_closed = trio.Event()
        self._draining = False

    @property
    def port(self) -> int:
        return self.addresses[0][1]

    @property
    def grpc_port(self) -> int | None:
        return self.grpc.port if self.grpc is not None else None

    def connection_count(self) -> int:
        """Remoting and gRPC connections: they share `max_connections`."""
        return len(self.connections) + (len(self.grpc.connections) if self.grpc else 0)

    def shutdown(self) -> None:
        """Begin a graceful shutdown; `serve` returns once it is complete. Idempotent."""
        self._shutdown.set()

    async def serve_listeners(
        self,
        listeners: list[trio.SocketListener],
        processors: Mapping[int, RequestProcessor],
        nursery: trio.Nursery,
    ) -> None:
        dispatcher = Dispatcher(processors)

        async def handler(stream: trio.SocketStream) -> None:
            await self._handle(stream, dispatcher)

        async with trio.open_nursery() as accepting:
            for listener in listeners:
                accepting.start_soon(
                    partial(accept_forever, connections=lambda: len(self.connections)),
                    listener,
                    handler,
                    nursery,
                )

    async def _handle(self, stream: trio.SocketStream, dispatcher: Dispatcher) -> None:
        if self.connection_count() >= self.broker.config.max_connections:
            await self._refuse(stream)
            return
        if self._refusing:
            self._refusing = False
            log.info("connections_accepted_again", connections=len(self.connections))
        connection = Connection(stream, peer_address(stream), self.broker, dispatcher)
        # Its consumers go as soon as it stops reading, as upstream's channel-close event: a
        # pull it left held (up to its suspend time) must not keep a dead client in its group.
        consumers, conn_id = self.broker.consumers, connection.conn_id
        connection.on_reading_done = lambda: consumers.connection_closed(conn_id)
        self.connections.add(connection)
        metrics = self.broker.metrics
        if metrics is not None:
            metrics.connection_opened()
        if self._draining:
            connection.stop_reading("shutdown")
        remote = connection.ctx.remote_text
        with structlog.contextvars.bound_contextvars(conn_id=connection.conn_id, remote=remote):
            log.debug("connection_opened")
            try:
                await connection.run()
            except Exception:
                # One connection's failure must never reach the server's nursery and stop
                # the broker for every other client.
                log.exception("connection_failed")
            finally:
                self.connections.discard(connection)
                self.broker.consumers.connection_closed(connection.conn_id)
                self.broker.producers.connection_closed(connection.conn_id)
                self.broker.peers.connection_closed(connection.conn_id)
                if self._draining and not self.connections:
                    self._all_closed.set()
                await trio.aclose_forcefully(stream)
                if metrics is not None:
                    metrics.connection_closed()
                log.debug(
                    "connection_closed",
                    reason=connection.close_reason,
                    requests=connection.requests,
                )

    async def _refuse(self, stream: trio.SocketStream) -> None:
        """Past `max_connections`: close at once, one event per spell of refusals."""
        self.refused_connections += 1
        if self.broker.metrics is not None:
            self.broker.metrics.connection_refused()
        if not self._refusing:
            self._refusing = True
            log.warning(
                "connection_refused",
                reason="max_connections",
                limit=self.broker.config.max_connections,
                remote=peer_address(stream)[0],
            )
        await trio.aclose_forcefully(stream)

    async def drain(self, timeout_s: float) -> bool:
        """Stop reading on every connection, wait for running requests; False on timeout."""
        self._draining = True
        self.broker.pull_waiters.release_all()  # held pulls are answered now, not at their end
        for connection in list(self.connections):
            connection.stop_reading("shutdown")
        if not self.connections:
            return True
        with trio.move_on_after(timeout_s):
            await self._all_closed.wait()
            return True
        return False

    async def wait_shutdown(self) -> None:
        await self._shutdown.wait()


async def _open_listeners(key: str, address: HostPort) -> list[trio.SocketListener]:
    host = None if address.host in ("", "*") else address.host
    try:
        return await trio.open_tcp_listeners(address.port, host=host)
    except OSError as exc:
        raise bind_error(key, address, exc) from None


def _bound(listeners: list[trio.SocketListener]) -> list[tuple[str, int]]:
    return [tuple(listener.socket.getsockname()[:2]) for listener in listeners]


async def serve(
    config: BrokerConfig, *, task_status: trio.TaskStatus[BrokerServer] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run the broker until `BrokerServer.shutdown()`; report the server once it accepts.

    Raises OSError when a listen address cannot be bound, `ConfigError` for unusable ACL or
    TLS files; store failures at open propagate.
    """
    config = admin_registry.saved_config(config)  # UPDATE_BROKER_CONFIG's saved changes
    check_security_files(config)
    raise_open_files_limit()
    listeners = await _open_listeners("listen", config.listen)
    namesrv_listeners = (
        await _open_listeners("namesrv_listen", config.namesrv_listen)
        if config.namesrv_listen is not None
        else []
    )
    grpc_listeners = (
        await _open_listeners("grpc_listen", config.grpc_listen)
        if config.grpc_listen is not None
        else []
    )
    addresses = _bound(listeners)
    store_host = (config.store_host_ip, addresses[0][1])
    root = Path(config.store.store_path_root_dir)
    log.info("startup", store_dir=str(root), flush_disk_type=config.store.flush_disk_type.name)
    metrics = BrokerMetrics()
    async with (
        DefaultMessageStore.open(config.store, flusher=timed_flusher(metrics)) as store,
        serving_metrics(config, store, metrics) as http,
    ):
        topics = TopicConfigManager(
            root / "config" / "topics.json",
            auto_create_topic_enable=config.auto_create_topic_enable,
            default_topic_queue_nums=config.default_topic_queue_nums,
            cluster_name=config.broker_cluster_name,
            broker_name=config.broker_name,
            auto_create_topic_max_num=config.auto_create_topic_max_num,
        )
        await topics.persist()
        groups = SubscriptionGroupManager(
            root / "config" / "subscriptionGroup.json",
            auto_create=config.auto_create_subscription_group,
            max_num=config.auto_create_subscription_group_max_num,
        )
        broker = BrokerContext(config, store, topics, groups, store_host, metrics)
        broker.read_budget = ReadBudget(config.max_buffered_bytes)
        broker.locks = RebalanceLockManager(config.rebalance_lock_max_live_time / 1000)
        _consume_side(broker, store, root)
        server = BrokerServer(broker)
        server.addresses = addresses
        server.namesrv_addresses = _bound(namesrv_listeners)
        if http is not None:
            http.attach(server, trio.lowlevel.current_trio_token())
            server.http_port = http.port
        _settle_garbage_collector()
        async with trio.open_nursery() as background:
            await background.start(
                broker.offsets.run, config.flush_consumer_offset_interval_ms / 1000
            )
            await background.start(
                broker.consumers.run_housekeeping, broker.locks.expire, broker.producers.expire
            )
            broker.transactions = TransactionService(broker)
            schedule = ScheduleMessageService(broker, root / "config")
            schedule.load()
            if config.store.broker_role is not BrokerRole.SLAVE:  # a slave stores nothing itself
                await background.start(broker.transactions.run)
                await background.start(schedule.run)
                reviver, attempts = _pop_side(broker, root / "config")
                await background.start(reviver.run)
                every_s = config.flush_consumer_offset_interval_ms / 1000
                await background.start(attempts.run, every_s)
            await admin_registry.start(broker, background, schedule)
            broker.ha = HAService(broker, store, schedule)
            await broker.ha.start(background)
            await background.start(broker.peers.run)
            if config.namesrv_addrs:
                server.registration = Registration(
                    config,
                    topics,
                    broker.addr,
                    ha_port=broker.ha.ha_port,
                    on_master=broker.ha.update_master_addresses,
                )
                await background.start(server.registration.run)
            if grpc_listeners:
                server.grpc = broker_grpc_server(broker, server.connection_count, grpc_listeners)
            await _run(server, listeners, namesrv_listeners, grpc_listeners, task_status)
            background.cancel_scope.cancel()  # the offsets are written once more on the way out
    log.info("shutdown_complete")


def _consume_side(broker: BrokerContext, store: DefaultMessageStore, root: Path) -> None:
    """Wire the pull path: the store's consume queues, persisted offsets, heartbeats."""
    broker.consume = store.consume
    broker.offsets = ConsumerOffsetManager(root / "config")
    broker.offsets.load()
    broker.heartbeat_listeners.append(broker.consumers.on_heartbeat)
    broker.heartbeat_listeners.append(broker.producers.on_heartbeat)
    if store.consume is not None:
        store.consume.add_listener(broker.pull_waiters.on_arrival)


def _pop_side(broker: BrokerContext, config_dir: Path) -> tuple[Reviver, OrderAttemptsFile]:
    """Pop consumption: the checkpoints still in flight read back from the revive topic, and
    the FIFO groups' delivery counts from their file."""
    broker.pop = pop = PopService(broker)
    path = config_dir / ORDER_ATTEMPTS_FILE
    pop.order_attempts = order_attempts.load(path)
    reviver = Reviver(pop)
    reviver.replay()
    held = [
        (ck.group, ck.topic, ck.queue_id, offset)
        for ck in pop.inflight.values()
        if ck.order
        for offset in ck.unacked()
    ]
    order_attempts.prune(pop.order_attempts, broker.offsets.query, held)
    return reviver, OrderAttemptsFile(path, pop.order_attempts)


#: allocations between young-generation collections; a request allocates a few dozen objects
GC_YOUNG_THRESHOLD = 20_000


def _settle_garbage_collector() -> None:
    """Move what startup built (modules, tables) out of the collector's sight and collect
    young objects less often: with the defaults a full collection rescans every long-lived
    object every few thousand requests, a large share of a message's CPU. Requests make
    almost no reference cycles; their garbage is freed by reference counting."""
    gc.collect()
    gc.freeze()
    young, older, oldest = gc.get_threshold()
    gc.set_threshold(max(GC_YOUNG_THRESHOLD, young), older, oldest)


async def _run(
    server: BrokerServer,
    listeners: list[trio.SocketListener],
    namesrv_listeners: list[trio.SocketListener],
    grpc_listeners: list[trio.SocketListener],
    task_status: trio.TaskStatus[BrokerServer],
) -> None:
    config = server.broker.config
    async with trio.open_nursery() as connections:
        if server.grpc is not None:
            await connections.start(server.grpc.run, grpc_listeners)
        async with trio.open_nursery() as accepting:
            accepting.start_soon(
                server.serve_listeners, listeners, broker_processors(), connections
            )
            if namesrv_listeners:
                accepting.start_soon(
                    server.serve_listeners, namesrv_listeners, namesrv_processors(), connections
                )
            grpc = {"grpc_port": server.grpc_port} if server.grpc is not None else {}
            for host, port in server.addresses + server.namesrv_addresses:
                log.info("listening", host=host, port=port, **grpc)
            task_status.started(server)
            await server.wait_shutdown()
            log.info("shutdown", connections=len(server.connections))
            if server.registration is not None:
                # out of the routes first, so that clients stop choosing this broker
                await server.registration.unregister_all()
            accepting.cancel_scope.cancel()
            if server.grpc is not None:
                server.grpc.shutdown(config.shutdown_timeout_s)
        for listener in listeners + namesrv_listeners:
            await listener.aclose()
        if not await server.drain(config.shutdown_timeout_s):
            log.warning("shutdown_deadline_passed", connections=len(server.connections))
            connections.cancel_scope.cancel()
