"""The route table under any sequence of registrations, unregistrations, closes and expiries.

Hypothesis drives `RouteInfoManager` with brokers drawn from a small pool (so names, addresses,
ids and clusters collide: slaves promoted, addresses reused under another name, a name moved
to another cluster) and checks after every step what no sequence may break: no topic without
queue data, no broker name without an address, cluster lists that name exactly the known
broker names, routes that only point at known brokers, and the `max_brokers` bounds. A table
that kept an empty topic after its last broker left, or a cluster listing a forgotten broker,
fails here.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from namesrv.routeinfo import RouteInfoManager
from protocol.admin_topic import DataVersion, TopicConfigData
from protocol.errors import HeaderFieldError

MAX_BROKERS = 4
ADDRS = st.sampled_from([f"10.0.0.{i}:10911" for i in range(6)])
NAMES = st.sampled_from(["broker-a", "broker-b", "broker-c", "broker-d", "broker-e"])
CLUSTERS = st.sampled_from(["C1", "C2", "C3", "C4", "C5"])
IDS = st.sampled_from([0, 0, 1, 2])
TOPICS = st.lists(
    st.builds(
        TopicConfigData,
        st.sampled_from(["T1", "T2", "T3", "%RETRY%g"]),
        st.integers(0, 8),
        st.integers(0, 8),
        st.sampled_from([2, 4, 6]),
    ),
    max_size=3,
    unique_by=lambda t: t.topic_name,
)


class RouteTable(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.routes = RouteInfoManager(
            broker_expired_s=120, max_brokers=MAX_BROKERS, clock=lambda: self.now
        )

    @rule(
        addr=ADDRS,
        name=NAMES,
        cluster=CLUSTERS,
        broker_id=IDS,
        topics=TOPICS,
        counter=st.integers(0, 3),
        conn_id=st.integers(1, 3),
    )
    def register(  # noqa: PLR0917 (hypothesis passes each drawn value)
        self,
        addr: str,
        name: str,
        cluster: str,
        broker_id: int,
        topics: list[TopicConfigData],
        counter: int,
        conn_id: int,
    ) -> None:
        version = DataVersion(counter, counter)
        try:
            self.routes.register_broker(
                cluster, addr, name, broker_id, addr, version, tuple(topics), conn_id=conn_id
            )
        except HeaderFieldError as exc:
            assert "(max_brokers)" in str(exc)

    @rule(addr=ADDRS, name=NAMES, cluster=CLUSTERS, broker_id=IDS)
    def unregister(self, addr: str, name: str, cluster: str, broker_id: int) -> None:
        self.routes.unregister_broker(cluster, addr, name, broker_id)

    @rule(conn_id=st.integers(1, 3))
    def close(self, conn_id: int) -> None:
        self.routes.on_connection_closed(conn_id)

    @rule(seconds=st.sampled_from([1.0, 60.0, 121.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self.routes.scan_not_active_broker()

    @rule(topic=st.sampled_from(["T1", "T2", "T3"]), cluster=st.none() | CLUSTERS)
    def delete_topic(self, topic: str, cluster: str | None) -> None:
        self.routes.delete_topic(topic, cluster)

    @rule(name=NAMES, wipe=st.booleans())
    def write_perm(self, name: str, wipe: bool) -> None:
        self.routes.operate_write_perm_of_broker(name, wipe)

    @invariant()
    def no_empty_entries(self) -> None:
        routes = self.routes
        assert all(routes.topic_queue_table.values())
        assert all(group.broker_addrs for group in routes.broker_addr_table.values())
        assert all(routes.cluster_addr_table.values())

    @invariant()
    def clusters_name_exactly_the_known_brokers(self) -> None:
        listed: set[str] = set()
        for names in self.routes.cluster_addr_table.values():
            listed |= names
        assert listed == set(self.routes.broker_addr_table)

    @invariant()
    def routes_point_at_known_brokers(self) -> None:
        for topic in self.routes.topic_queue_table:
            route = self.routes.pickup_topic_route_data(topic)
            if route is None:
                continue
            for data in route.broker_datas:
                group = self.routes.broker_addr_table[data.broker_name]
                assert data.broker_addrs == group.broker_addrs
                assert data.broker_addrs

    @invariant()
    def bounded(self) -> None:
        assert len(self.routes.broker_live_table) <= MAX_BROKERS
        assert len(self.routes.broker_addr_table) <= MAX_BROKERS
        assert len(self.routes.cluster_addr_table) <= MAX_BROKERS


TestRouteTable = RouteTable.TestCase
TestRouteTable.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
