"""`RouteInfoManager`: which brokers are alive, and which of them hold which topic's queues.

Mirrors 4.9's `namesrv/routeinfo/RouteInfoManager.java`. Five tables:

    topic_queue_table    topic -> broker name -> QueueData (queue counts and perm)
    broker_addr_table    broker name -> cluster and broker id -> address (0 is the master)
    cluster_addr_table   cluster -> broker names
    broker_live_table    broker address -> last registration time, data version, connection
    filter_server_table  broker address -> filter servers (carried, as 4.9 does)

A master's registration replaces the queue data of every topic it lists when its data version
changed or it registers first; a slave's only refreshes its liveness. A topic a broker stops
listing keeps its queue data until DELETE_TOPIC_IN_NAMESRV, the broker's unregistration or its
expiry, as in 4.9. A broker address is forgotten (and a broker name with no address left takes
its topics along) on UNREGISTER_BROKER, when the connection it registered on closes, or when no
registration came for `broker_expired_s`. The table is synchronous and knows no sockets: time
comes from the injected `clock` (trio's, so tests can autojump), and a connection is the
`conn_id` the server gives it. Growth is bounded by `max_brokers` (addresses, broker names and
clusters each); a registration past it is refused before anything changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import structlog

from protocol.admin_topic import DataVersion, TopicConfigData
from protocol.errors import HeaderFieldError
from protocol.namesrv_headers import MASTER_ID
from protocol.route import BrokerData, ClusterInfo, QueueData, TopicRouteData

#: `PermName`: the bits of a queue's perm
PERM_READ = 0x4
PERM_WRITE = 0x2
#: `TopicSysFlag`: a unit topic, a topic with unit subscriptions
FLAG_UNIT = 0x1
FLAG_UNIT_SUB = 0x2

log = structlog.get_logger()

# What a registration did to one topic's queue data.
_CREATED = 1
_CHANGED = 2
_SAME = 0


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update: float
    data_version: DataVersion
    conn_id: int | None
    ha_server_addr: str


@dataclass(slots=True)
class BrokerGroup:
    """One broker name: its cluster and its addresses by broker id."""

    cluster: str
    broker_addrs: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RegisterBrokerResult:
    """What a slave learns of its master; both None for a master or a slave without one."""

    ha_server_addr: str | None = None
    master_addr: str | None = None


class RouteInfoManager:
    """The route table; see the module docstring."""

    def __init__(
        self, *, broker_expired_s: float, max_brokers: int, clock: Callable[[], float]
    ) -> None:
        self.broker_expired_s = broker_expired_s
        self.max_brokers = max_brokers
        self.clock = clock
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerGroup] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}

    # -- registration ------------------------------------------------------------------------

    def register_broker(  # noqa: PLR0917 (4.9's signature)
        self,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        data_version: DataVersion,
        topics: tuple[TopicConfigData, ...],
        filter_server_list: list[str] | None = None,
        conn_id: int | None = None,
    ) -> RegisterBrokerResult:
        """Record a registration. Raises `HeaderFieldError` (nothing changed) when it would
        take an address, a broker name or a cluster past `max_brokers`."""
        self._check_room(cluster, broker_addr, broker_name)
        self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)
        group = self.broker_addr_table.get(broker_name)
        first = group is None
        if group is None:
            group = self.broker_addr_table[broker_name] = BrokerGroup(cluster)
        # One address has one broker id: a slave turned master drops its old id first.
        for stale_id in [i for i, a in group.broker_addrs.items() if a == broker_addr]:
            if stale_id != broker_id:
                del group.broker_addrs[stale_id]
        old_addr = group.broker_addrs.get(broker_id)
        group.broker_addrs[broker_id] = broker_addr
        if broker_id == MASTER_ID and old_addr is not None and old_addr != broker_addr:
            log.info("master_changed", broker_name=broker_name, old=old_addr, new=broker_addr)
        first = first or old_addr is None
        created = changed = 0
        if broker_id == MASTER_ID and (
            first or self.is_broker_topic_config_changed(broker_addr, data_version)
        ):
            for topic in topics:
                outcome = self._create_and_update_queue_data(broker_name, topic)
                created += outcome == _CREATED
                changed += outcome == _CHANGED
        previous = self.broker_live_table.get(broker_addr)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            self.clock(), data_version, conn_id, ha_server_addr
        )
        if previous is None or created or changed:
            log.info(
                "broker_registered" if previous is None else "broker_topics_changed",
                broker_addr=broker_addr,
                broker_name=broker_name,
                cluster=cluster,
                broker_id=broker_id,
                topics=len(topics),
                new_topics=created,
                changed_topics=changed,
            )
        if filter_server_list is not None:
            if filter_server_list:
                self.filter_server_table[broker_addr] = filter_server_list
            else:
                self.filter_server_table.pop(broker_addr, None)
        return self._master_of(group, broker_id)

    def _check_room(self, cluster: str, broker_addr: str, broker_name: str) -> None:
        for table, key, what in (
            (self.broker_live_table, broker_addr, "broker addresses"),
            (self.broker_addr_table, broker_name, "broker names"),
            (self.cluster_addr_table, cluster, "clusters"),
        ):
            if key not in table and len(table) >= self.max_brokers:
                raise HeaderFieldError(
                    "brokerAddr",
                    f"the name server holds {len(table)} {what} already (max_brokers)",
                )

    def _master_of(self, group: BrokerGroup, broker_id: int) -> RegisterBrokerResult:
        if broker_id == MASTER_ID:
            return RegisterBrokerResult()
        master = group.broker_addrs.get(MASTER_ID)
        live = self.broker_live_table.get(master) if master is not None else None
        if live is None:
            return RegisterBrokerResult()
        return RegisterBrokerResult(live.ha_server_addr, master)

    def _create_and_update_queue_data(self, broker_name: str, topic: TopicConfigData) -> int:
        """Set the broker's queue data for the topic; `_CREATED`, `_CHANGED` or `_SAME`."""
        queue = QueueData(
            broker_name,
            topic.read_queue_nums,
            topic.write_queue_nums,
            topic.perm,
            topic.topic_sys_flag,
        )
        queues = self.topic_queue_table.get(topic.topic_name)
        if queues is None:
            self.topic_queue_table[topic.topic_name] = {broker_name: queue}
            return _CREATED
        old = queues.get(broker_name)
        queues[broker_name] = queue
        if old is None:
            return _CREATED
        return _SAME if old == queue else _CHANGED

    def is_broker_topic_config_changed(self, broker_addr: str, version: DataVersion) -> bool:
        return self.query_broker_topic_config(broker_addr) != version

    def query_broker_topic_config(self, broker_addr: str) -> DataVersion | None:
        live = self.broker_live_table.get(broker_addr)
        return None if live is None else live.data_version

    def update_broker_info_update_timestamp(self, broker_addr: str) -> None:
        live = self.broker_live_table.get(broker_addr)
        if live is not None:
            live.last_update = self.clock()

    # -- leaving -----------------------------------------------------------------------------

    def unregister_broker(
        self, cluster: str, broker_addr: str, broker_name: str, broker_id: int
    ) -> None:
        """UNREGISTER_BROKER: forget the address; a broker name left with none takes its
        topics' queue data along. Unlike 4.9, the broker id's address is only dropped when it
        is `broker_addr`: a stale or mistaken request cannot remove a live broker that took
        the id over. `cluster` is not needed to find the broker name (it is dropped from
        every cluster that lists it)."""
        live = self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        group = self.broker_addr_table.get(broker_name)
        removed = group is not None and group.broker_addrs.get(broker_id) == broker_addr
        if group is not None and removed:
            del group.broker_addrs[broker_id]
        log.info(
            "broker_unregistered",
            broker_addr=broker_addr,
            broker_name=broker_name,
            cluster=cluster,
            was_live=live is not None,
            address_removed=removed,
        )
        if group is not None and not group.broker_addrs:
            self._drop_broker_name(broker_name)

    def scan_not_active_broker(self) -> list[str]:
        """Forget every broker address not registered for `broker_expired_s`; their addresses."""
        deadline = self.clock() - self.broker_expired_s
        expired = [a for a, live in self.broker_live_table.items() if live.last_update < deadline]
        for addr in expired:
            log.warning("broker_expired", broker_addr=addr, expired_s=self.broker_expired_s)
            self.remove_broker_addr(addr)
        return expired

    def on_connection_closed(self, conn_id: int) -> list[str]:
        """Forget the brokers whose last registration came on this connection (4.9's
        `onChannelDestroy`); their addresses."""
        gone = [a for a, live in self.broker_live_table.items() if live.conn_id == conn_id]
        for addr in gone:
            log.info("broker_connection_closed", broker_addr=addr)
            self.remove_broker_addr(addr)
        return gone

    def remove_broker_addr(self, broker_addr: str) -> None:
        """Forget one address wherever it is; a broker name left with no address leaves its
        cluster and takes its topics' queue data along."""
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        for name, group in list(self.broker_addr_table.items()):
            ids = [i for i, a in group.broker_addrs.items() if a == broker_addr]
            for broker_id in ids:
                del group.broker_addrs[broker_id]
            if ids and not group.broker_addrs:
                self._drop_broker_name(name)

    def _drop_broker_name(self, broker_name: str) -> None:
        del self.broker_addr_table[broker_name]
        for cluster, names in list(self.cluster_addr_table.items()):
            names.discard(broker_name)
            if not names:
                del self.cluster_addr_table[cluster]
        self._remove_topics_of(broker_name)

    def _remove_topics_of(self, broker_name: str) -> None:
        """Drop the broker name's queue data; a topic left with none goes (one event)."""
        dropped = gone = 0
        for topic, queues in list(self.topic_queue_table.items()):
            if queues.pop(broker_name, None) is not None:
                dropped += 1
                if not queues:
                    del self.topic_queue_table[topic]
                    gone += 1
        log.info(
            "broker_routes_removed", broker_name=broker_name, queue_datas=dropped, topics_gone=gone
        )

    # -- queries and admin -------------------------------------------------------------------

    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        """The merged route: every broker's queue data for the topic, and the addresses of
        those brokers; None when no broker has it (or none of its brokers is known)."""
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        brokers = []
        servers: dict[str, list[str]] = {}
        for name in sorted(queues):
            group = self.broker_addr_table.get(name)
            if group is None:
                continue
            brokers.append(BrokerData(group.cluster, name, dict(group.broker_addrs)))
            for addr in group.broker_addrs.values():
                if addr in self.filter_server_table:
                    servers[addr] = list(self.filter_server_table[addr])
        if not brokers:
            return None
        queue_datas = tuple(queues[name] for name in sorted(queues))
        return TopicRouteData(queue_datas, tuple(brokers), None, servers)

    def get_all_cluster_info(self) -> ClusterInfo:
        brokers = {
            name: BrokerData(group.cluster, name, dict(group.broker_addrs))
            for name, group in sorted(self.broker_addr_table.items())
        }
        clusters = {c: sorted(names) for c, names in sorted(self.cluster_addr_table.items())}
        return ClusterInfo(brokers, clusters)

    def get_all_topic_list(self) -> frozenset[str]:
        return frozenset(self.topic_queue_table)

    def get_topics_by_cluster(self, cluster: str) -> frozenset[str]:
        names = self.cluster_addr_table.get(cluster, set())
        return frozenset(
            topic for topic, queues in self.topic_queue_table.items() if names & queues.keys()
        )

    def get_system_topic_list(self) -> tuple[frozenset[str], str | None]:
        """GET_SYSTEM_TOPIC_LIST_FROM_NS: every cluster name and broker name (4.9 lists them
        as the topics named after them), and one broker's address for the client to ask."""
        names = set(self.cluster_addr_table)
        for brokers in self.cluster_addr_table.values():
            names |= brokers
        addr = next(
            (
                next(iter(g.broker_addrs.values()))
                for g in self.broker_addr_table.values()
                if g.broker_addrs
            ),
            None,
        )
        return frozenset(names), addr

    def topics_by_sys_flag(self, pick: Callable[[int], bool]) -> frozenset[str]:
        """The topics whose first queue data (by broker name) has a topicSysFlag `pick`
        accepts: GET_UNIT_TOPIC_LIST and its two siblings."""
        return frozenset(
            topic
            for topic, queues in self.topic_queue_table.items()
            if pick(queues[min(queues)].topic_sys_flag)
        )

    def delete_topic(self, topic: str, cluster: str | None = None) -> bool:
        """Drop the topic's queue data (only that of the cluster's brokers when `cluster` is
        given); True when anything was dropped."""
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            return False
        if not cluster:
            del self.topic_queue_table[topic]
            return True
        removed = False
        for name in self.cluster_addr_table.get(cluster, set()):
            removed = queues.pop(name, None) is not None or removed
        if not queues:
            del self.topic_queue_table[topic]
        return removed

    def operate_write_perm_of_broker(self, broker_name: str, wipe: bool) -> int:
        """WIPE_WRITE_PERM_OF_BROKER takes WRITE off each of the broker's queue data;
        ADD_WRITE_PERM_OF_BROKER sets READ|WRITE. The number of topics touched."""
        count = 0
        for queues in self.topic_queue_table.values():
            queue = queues.get(broker_name)
            if queue is None:
                continue
            perm = queue.perm & ~PERM_WRITE if wipe else PERM_READ | PERM_WRITE
            queues[broker_name] = replace(queue, perm=perm)
            count += 1
        return count
