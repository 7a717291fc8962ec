"""Other brokers registered with this broker's embedded name-server role.

A broker started with `namesrv_addr` pointing at another broker (not at a standalone name
server) registers with that broker's name-server role as it would with `rmq-broker namesrv`.
`PeerRoutes` keeps those registrations in the name server's own `RouteInfoManager` and answers
REGISTER_BROKER, UNREGISTER_BROKER and QUERY_DATA_VERSION through the name server's
`DefaultRequestProcessor` (same codes, remarks and bounds). The embedded role's routes and
cluster info then merge this broker with its peers (`broker.processors.namesrv`). Peers leave
as in a name server: when they unregister, when the connection they registered on closes, or
after `broker_expired_s` (120 s) without a registration, looked for every 10 s. The role keeps
no KV config: REGISTER_BROKER answers no ORDER_TOPIC_CONFIG list.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Final

import trio

from namesrv.config import BROKER_EXPIRED_S, SCAN_INTERVAL_S, NamesrvConfig
from namesrv.kvconfig import KVConfigManager
from namesrv.processor import DefaultRequestProcessor, Peer
from namesrv.routeinfo import RouteInfoManager
from protocol.command import RemotingCommand
from protocol.route import BrokerData, ClusterInfo, QueueData

#: the template topic of auto-creation and its inheritable permission bit
_TEMPLATE: Final = "TBW102"
_PERM_INHERIT: Final = 1
#: how many queues a client's first send to a new topic asks for (the Java client's default)
_CLIENT_QUEUE_NUMS: Final = 4


class PeerRoutes:
    """The peers' route table and the name server's answers to their registrations."""

    def __init__(
        self, *, broker_expired_s: float = BROKER_EXPIRED_S, max_brokers: int = 1024
    ) -> None:
        # The KV file is never read or written: only its (empty) table is used.
        self.config = NamesrvConfig(
            kv_config_path=os.devnull, broker_expired_s=broker_expired_s, max_brokers=max_brokers
        )
        self.routes = RouteInfoManager(
            broker_expired_s=broker_expired_s, max_brokers=max_brokers, clock=trio.current_time
        )
        kv = KVConfigManager(self.config.kv_config_path, max_entries=1)
        self.processor = DefaultRequestProcessor(self.config, self.routes, kv)

    async def answer(
        self, request: RemotingCommand, conn_id: int, remote: str, address: tuple[str, int]
    ) -> RemotingCommand:
        return await self.processor.process(request, Peer(conn_id, remote, address))

    def connection_closed(self, conn_id: int) -> None:
        if self.routes.broker_live_table:
            self.routes.on_connection_closed(conn_id)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Expire silent peers every `SCAN_INTERVAL_S` until cancelled."""
        task_status.started()
        while True:
            await trio.sleep(SCAN_INTERVAL_S)
            self.routes.scan_not_active_broker()

    def has(self, topic: str, own_name: str) -> bool:
        """Whether a peer other than `own_name` registered `topic`."""
        queues = self.routes.topic_queue_table.get(topic) or {}
        return any(name != own_name for name in queues)

    def route(
        self, topic: str, own_name: str, *, would_create: bool
    ) -> tuple[list[QueueData], list[BrokerData]]:
        """The peers' queues and addresses for `topic` (never `own_name`'s). A topic no peer
        has that this broker would create is offered on every peer whose TBW102 is
        inheritable, with the queues a client's first send creates there (4.9's fallback to
        the template's route)."""
        found = self.routes.pickup_topic_route_data(topic)
        if found is not None:
            queues = [q for q in found.queue_datas if q.broker_name != own_name]
            brokers = found.broker_datas
        elif would_create and (template := self.routes.pickup_topic_route_data(_TEMPLATE)):
            queues = [
                replace(
                    q,
                    read_queue_nums=min(_CLIENT_QUEUE_NUMS, q.write_queue_nums),
                    write_queue_nums=min(_CLIENT_QUEUE_NUMS, q.write_queue_nums),
                    perm=q.perm & ~_PERM_INHERIT,
                )
                for q in template.queue_datas
                if q.perm & _PERM_INHERIT and q.broker_name != own_name
            ]
            brokers = template.broker_datas
        else:
            return [], []
        names = {q.broker_name for q in queues}
        return queues, [b for b in brokers if b.broker_name in names]

    def merged_cluster_info(self, own: ClusterInfo) -> ClusterInfo:
        """`own` (this broker alone) with every peer and its cluster."""
        if not self.routes.broker_addr_table:
            return own
        peers = self.routes.get_all_cluster_info()
        brokers = {**peers.broker_addr_table, **own.broker_addr_table}
        clusters = {name: list(members) for name, members in peers.cluster_addr_table.items()}
        for name, members in own.cluster_addr_table.items():
            clusters[name] = sorted(set(clusters.get(name, [])) | set(members))
        return ClusterInfo(dict(sorted(brokers.items())), dict(sorted(clusters.items())))
