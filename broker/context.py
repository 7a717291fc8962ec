"""`BrokerContext`: the state every processor shares (config, store, topic and group tables).

Built by `broker.server` once the store is open and the listeners are bound (the store host
needs the real port when the configuration asked for port 0). Processors reach it through
`RequestContext.broker`; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from broker.admin.state import AdminState
from broker.consumer_manager import ConsumerManager
from broker.consumer_offsets import ConsumerOffsetManager
from broker.long_polling import PullWaiters
from broker.peer_routes import PeerRoutes
from broker.producer_manager import ProducerManager
from broker.read_budget import ReadBudget
from broker.rebalance_lock import RebalanceLockManager
from store.consume_service import ConsumeService
from store.message import MessageExtBrokerInner, PutMessageResult

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.ha.service import HAService
    from broker.metrics import BrokerMetrics
    from broker.pop.service import PopService
    from broker.processors import RequestContext
    from broker.subscription_group import SubscriptionGroupManager
    from broker.topic_config import TopicConfigManager
    from broker.transaction import TransactionService
    from protocol.command import RemotingCommand
    from protocol.route import HeartbeatData


class MessageStore(Protocol):
    """What the broker needs of `store.message_store.DefaultMessageStore`."""

    #: the wall clock, in ms, that the store's STORETIMESTAMPs come from
    now_ms: Callable[[], int]

    async def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult: ...

    async def put_messages(self, msgs: list[MessageExtBrokerInner]) -> PutMessageResult: ...

    def submit_burst(
        self,
        puts: list[list[MessageExtBrokerInner]],
        on_results: Callable[[list[PutMessageResult]], None],
    ) -> None: ...

    def is_os_page_cache_busy(self) -> bool: ...

    def execute_delete_files_manually(self) -> None: ...


#: (the heartbeat, its connection, the HEART_BEAT command: the client's language and version)
HeartbeatListener = Callable[
    ["HeartbeatData", "RequestContext", "RemotingCommand"], Awaitable[None]
]


@dataclass(slots=True)
class BrokerContext:
    config: BrokerConfig
    store: MessageStore
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    #: broker_ip1 and the bound listen port: the store host of every record and the route address
    store_host: tuple[str, int]
    metrics: BrokerMetrics | None = None
    #: called with every HEART_BEAT (consumer bookkeeping registers here)
    heartbeat_listeners: list[HeartbeatListener] = field(default_factory=list)
    #: the consume side: queues to pull from, committed offsets, live consumers, held pulls
    consume: ConsumeService | None = None
    offsets: ConsumerOffsetManager = field(default_factory=lambda: ConsumerOffsetManager(None))
    consumers: ConsumerManager = field(default_factory=ConsumerManager)
    pull_waiters: PullWaiters = field(default_factory=PullWaiters)
    #: producer groups -> their connections, to check transactions with
    producers: ProducerManager = field(default_factory=ProducerManager)
    #: END_TRANSACTION and the check of half messages (set by the server)
    transactions: TransactionService | None = None
    #: replication: the master's HA listener or the slave's client (set by the server)
    ha: HAService | None = None
    #: the queue locks of orderly consumers (LOCK_BATCH_MQ)
    locks: RebalanceLockManager = field(default_factory=RebalanceLockManager)
    #: RocketMQ 5's pop consumption (set by the server once the store is open)
    pop: PopService | None = None
    #: what the admin requests keep: TPS samples, name-server role switches, config version
    admin: AdminState = field(default_factory=AdminState)
    #: partial frames held by every connection together (`max_buffered_bytes`)
    read_budget: ReadBudget = field(default_factory=lambda: ReadBudget(64 * 1024 * 1024))
    #: other brokers registered with this broker's name-server role
    peers: PeerRoutes = field(default_factory=PeerRoutes)
    #: the delay of each level in ms, level 1 first (`message_delay_level`, parsed once here)
    delay_levels_ms: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.delay_levels_ms = self.config.store.delay_levels_ms()

    @property
    def addr(self) -> str:
        # Unbracketed even for IPv6, as RocketMQ writes it: clients split at the last colon.
        ip, port = self.store_host
        return f"{ip}:{port}"
