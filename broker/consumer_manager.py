"""`ConsumerManager`: which clients consume in which group, from their heartbeats.

RocketMQ's `ConsumerManager`: every HEART_BEAT registers the client id under each of its
consumer groups and sets the group's subscriptions to the ones it carries; UNREGISTER_CLIENT
removes it; a client silent for `CHANNEL_EXPIRED_S` (120 s, as upstream's channel expiry) no
longer counts, and its connection closing removes it at once (upstream's doChannelCloseEvent).
A group left without clients is dropped with its subscriptions (housekeeping every
`HOUSEKEEPING_S`), so the table holds what live connections registered, not what every peer
ever sent.
GET_CONSUMER_LIST_BY_GROUP reads the live ids (rebalancing clients split the queues among them),
and a pull without its own subscription uses the group's. Each client keeps the language and
version of its heartbeat and its connection's `push` and `ask`, so that the admin requests can
list it (GET_CONSUMER_CONNECTION_LIST), tell it of a reset (RESET_CONSUMER_CLIENT_OFFSET) and
relay a request to it (GET_CONSUMER_RUNNING_INFO). When a group gains or loses a client, every
client left in it is told at once (NOTIFY_CONSUMER_IDS_CHANGED, oneway, as 4.9's
`DefaultConsumerIdsChangeListener`), so the members rebalance now rather than on their timer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

import structlog
import trio

from broker.topic_config import PERM_READ, PERM_WRITE, RETRY_GROUP_TOPIC_PREFIX
from protocol.codes import LanguageCode, RequestCode
from protocol.command import RemotingCommand
from protocol.route import HeartbeatData, SubscriptionData

if TYPE_CHECKING:
    from broker.processors import RequestContext

log = structlog.get_logger()

CHANNEL_EXPIRED_S: Final = 120.0
#: how often expired clients and empty groups are dropped (upstream's ClientHousekeepingService)
HOUSEKEEPING_S: Final = 10.0


@dataclass(slots=True)
class ConsumerClient:
    """One client of a group: its connection, and the language and version its heartbeat
    carried (4.9's `ClientChannelInfo`)."""

    remote: str
    last_seen: float
    conn_id: int = 0
    language: int = LanguageCode.JAVA
    version: int = 0
    #: queues a request of the broker's own on the client's connection (`RequestContext.push`)
    push: Callable[[RemotingCommand], bool] = lambda _command: False
    #: a request and its answer on that connection (`RequestContext.ask`)
    ask: Callable[[RemotingCommand, float], Awaitable[RemotingCommand]] | None = None


@dataclass(slots=True)
class ConsumerGroupInfo:
    clients: dict[str, ConsumerClient] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    #: as the latest heartbeat named them (4.9 keeps them per group too)
    consume_type: str | None = None
    message_model: str | None = None
    consume_from_where: str | None = None


class ConsumerManager:
    def __init__(self, clock: Callable[[], float] = trio.current_time) -> None:
        self._clock = clock
        self._groups: dict[str, ConsumerGroupInfo] = {}
        #: the groups each connection registered clients in
        self._by_conn: dict[int, set[str]] = {}

    async def on_heartbeat(
        self, heartbeat: HeartbeatData, ctx: RequestContext, request: RemotingCommand | None = None
    ) -> None:
        """A heartbeat listener (`BrokerContext.heartbeat_listeners`); `request` is the
        HEART_BEAT command, whose language and version describe the client."""
        now = self._clock()
        language = request.language if request is not None else LanguageCode.JAVA
        version = request.version if request is not None else 0
        for consumer in heartbeat.consumer_data_set:
            info = self._groups.get(consumer.group_name)
            if info is None:
                info = self._groups[consumer.group_name] = ConsumerGroupInfo()
            joined = heartbeat.client_id not in info.clients
            if joined:
                log.info(
                    "consumer_registered",
                    group=consumer.group_name,
                    client_id=heartbeat.client_id,
                )
            info.clients[heartbeat.client_id] = ConsumerClient(
                ctx.remote_text, now, ctx.conn_id, language, version, ctx.push, ctx.ask
            )
            if joined:
                _notify_ids_changed(consumer.group_name, info)
            info.consume_type = consumer.consume_type
            info.message_model = consumer.message_model
            info.consume_from_where = consumer.consume_from_where
            self._by_conn.setdefault(ctx.conn_id, set()).add(consumer.group_name)
            # The group's subscriptions are the latest heartbeat's, as upstream's
            # updateSubscription leaves them: topics it no longer names are dropped, so a
            # stream of heartbeats naming new topics cannot grow the table without bound.
            info.subscriptions = {s.topic: s for s in consumer.subscription_data_set}
            await _ensure_retry_topic(ctx, consumer.group_name)

    def unregister(self, client_id: str, group: str | None) -> None:
        groups = [group] if group else list(self._groups)
        for name in groups:
            info = self._groups.get(name)
            if info is not None and info.clients.pop(client_id, None) is not None:
                log.info("consumer_unregistered", group=name, client_id=client_id)
                _notify_ids_changed(name, info)

    def connection_closed(self, conn_id: int) -> None:
        """Forget the clients that connection `conn_id` registered."""
        for name in self._by_conn.pop(conn_id, ()):
            info = self._groups.get(name)
            if info is None:
                continue
            # A client that re-registered on another connection stays: only the ones still
            # on this connection go, and the group is told only when one went.
            closed = [c for c, client in info.clients.items() if client.conn_id == conn_id]
            for client_id in closed:
                del info.clients[client_id]
                log.info("consumer_closed", group=name, client_id=client_id)
            if closed:
                _notify_ids_changed(name, info)
            if not info.clients:
                del self._groups[name]

    def expire(self) -> None:
        """Drop clients silent for `CHANNEL_EXPIRED_S`, and groups left without clients."""
        cutoff = self._clock() - CHANNEL_EXPIRED_S
        for name in list(self._groups):
            info = self._groups[name]
            expired = [c for c, client in info.clients.items() if client.last_seen < cutoff]
            for client_id in expired:
                del info.clients[client_id]
                log.info("consumer_expired", group=name, client_id=client_id)
            if expired:
                _notify_ids_changed(name, info)
            if not info.clients:
                del self._groups[name]

    @property
    def group_count(self) -> int:
        return len(self._groups)

    async def run_housekeeping(
        self,
        *also: Callable[[], object],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Every `HOUSEKEEPING_S`: expire silent clients, then run `also` (other tables' expiry)."""
        task_status.started()
        while True:
            await trio.sleep(HOUSEKEEPING_S)
            self.expire()
            for expire in also:
                expire()

    def client_ids(self, group: str) -> list[str]:
        """The live clients of `group`, expired ones dropped."""
        info = self.group_info(group)
        return [] if info is None else sorted(info.clients)

    def group_info(self, group: str) -> ConsumerGroupInfo | None:
        """`group` with its live clients (expired ones dropped), or None when it has none."""
        info = self._groups.get(group)
        if info is None:
            return None
        cutoff = self._clock() - CHANNEL_EXPIRED_S
        for client_id in [c for c, client in info.clients.items() if client.last_seen < cutoff]:
            del info.clients[client_id]
            log.info("consumer_expired", group=group, client_id=client_id)
        return info if info.clients else None

    def groups_consuming(self, topic: str) -> list[str]:
        """The groups with a live client subscribed to `topic`."""
        return sorted(
            name
            for name in list(self._groups)
            if topic in self._groups[name].subscriptions and self.group_info(name) is not None
        )

    def group_table(self) -> Mapping[str, ConsumerGroupInfo]:
        """The live groups, read-only: their clients and subscriptions."""
        return MappingProxyType(self._groups)

    def subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self._groups.get(group)
        return info.subscriptions.get(topic) if info is not None else None


async def _ensure_retry_topic(ctx: RequestContext, group: str) -> None:
    """A consumer group gets its `%RETRY%<group>` topic on its first heartbeat, as upstream:
    clients subscribe to it and send messages back to it."""
    config = ctx.broker.groups.find(group)
    if config is None or config.retry_queue_nums <= 0:
        return
    topics = ctx.broker.topics
    name = RETRY_GROUP_TOPIC_PREFIX + group
    if topics.find(name) is None:
        topics.create_in_send_back(name, config.retry_queue_nums, PERM_READ | PERM_WRITE, 0)
        await topics.persist()


def _notify_ids_changed(group: str, info: ConsumerGroupInfo) -> None:
    """NOTIFY_CONSUMER_IDS_CHANGED to every client of `group` (a connection that cannot take
    it now is skipped: its client rebalances on its own timer)."""
    for client in info.clients.values():
        command = RemotingCommand.request(
            RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}, oneway=True
        )
        client.push(command)
