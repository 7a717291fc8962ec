"""The route table alone: registration, merge, masters and slaves, expiry, leaving, bounds.

Each test names the 4.9 rule it holds `RouteInfoManager` to; expiry is timed with trio's
autojump clock through the server's own scan task, so the scan period and the expiry time are
checked to the exact second.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from namesrv.config import NamesrvConfig
from namesrv.kvconfig import KVConfigManager
from namesrv.routeinfo import PERM_READ, PERM_WRITE, RouteInfoManager
from namesrv.server import NamesrvServer
from protocol.admin_topic import DataVersion, TopicConfigData
from protocol.errors import HeaderFieldError
from protocol.route import BrokerData, QueueData

V1 = DataVersion(1, 1000)
V2 = DataVersion(2, 2000)
A_MASTER = "10.0.0.1:10911"
A_SLAVE = "10.0.0.2:10911"
B_MASTER = "10.0.0.3:10911"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def table(max_brokers: int = 16) -> tuple[RouteInfoManager, Clock]:
    clock = Clock()
    return RouteInfoManager(broker_expired_s=120, max_brokers=max_brokers, clock=clock), clock


def topic(name: str, queues: int = 4, perm: int = 6) -> TopicConfigData:
    return TopicConfigData(name, queues, queues, perm)


def register(
    routes: RouteInfoManager,
    addr: str,
    name: str,
    *topics: TopicConfigData,
    broker_id: int = 0,
    version: DataVersion = V1,
    cluster: str = "C1",
    conn_id: int | None = None,
) -> None:
    routes.register_broker(
        cluster,
        addr,
        name,
        broker_id,
        addr.replace("10911", "10912"),
        version,
        topics,
        conn_id=conn_id,
    )


def test_route_merges_the_queue_data_of_every_broker_with_the_topic() -> None:
    routes, _ = table()
    register(routes, A_MASTER, "broker-a", topic("T", 4), topic("OnlyA"))
    register(routes, B_MASTER, "broker-b", topic("T", 8), cluster="C2")
    route = routes.pickup_topic_route_data("T")
    assert route is not None
    assert route.queue_datas == (QueueData("broker-a", 4, 4, 6), QueueData("broker-b", 8, 8, 6))
    assert route.broker_datas == (
        BrokerData("C1", "broker-a", {0: A_MASTER}),
        BrokerData("C2", "broker-b", {0: B_MASTER}),
    )
    only_a = routes.pickup_topic_route_data("OnlyA")
    assert only_a is not None and [b.broker_name for b in only_a.broker_datas] == ["broker-a"]
    assert routes.pickup_topic_route_data("Nobody") is None
    assert routes.get_all_topic_list() == {"T", "OnlyA"}
    assert routes.get_topics_by_cluster("C2") == {"T"}
    assert routes.get_topics_by_cluster("nope") == frozenset()


def test_slave_is_listed_with_its_master_and_told_the_masters_addresses() -> None:
    routes, _ = table()
    register(routes, A_MASTER, "broker-a", topic("T"))
    result = routes.register_broker("C1", A_SLAVE, "broker-a", 1, "ha-slave", V1, (topic("X"),))
    assert (result.master_addr, result.ha_server_addr) == (A_MASTER, "10.0.0.1:10912")
    route = routes.pickup_topic_route_data("T")
    assert route is not None and route.broker_datas[0].broker_addrs == {0: A_MASTER, 1: A_SLAVE}
    assert routes.pickup_topic_route_data("X") is None  # a slave's topics are not routes
    master = routes.register_broker("C1", A_MASTER, "broker-a", 0, "ha", V1, ())
    assert (master.master_addr, master.ha_server_addr) == (None, None)


def test_a_slave_without_a_live_master_learns_nothing() -> None:
    routes, _ = table()
    result = routes.register_broker("C1", A_SLAVE, "broker-a", 1, "ha", V1, ())
    assert (result.master_addr, result.ha_server_addr) == (None, None)


def test_slave_promoted_to_master_keeps_one_id_per_address() -> None:
    routes, _ = table()
    register(routes, A_SLAVE, "broker-a", broker_id=1)
    register(routes, A_SLAVE, "broker-a", topic("T"), broker_id=0)
    assert routes.broker_addr_table["broker-a"].broker_addrs == {0: A_SLAVE}


def test_queue_data_changes_only_with_the_data_version() -> None:
    routes, _ = table()
    register(routes, A_MASTER, "broker-a", topic("T", 4))
    register(routes, A_MASTER, "broker-a", topic("T", 16))  # same version: not read
    route = routes.pickup_topic_route_data("T")
    assert route is not None and route.queue_datas[0].write_queue_nums == 4
    register(routes, A_MASTER, "broker-a", topic("T", 16), version=V2)
    route = routes.pickup_topic_route_data("T")
    assert route is not None and route.queue_datas[0].write_queue_nums == 16


def test_a_topic_the_broker_stops_listing_stays_until_deleted_as_in_49() -> None:
    routes, _ = table()
    register(routes, A_MASTER, "broker-a", topic("T"), topic("Old"))
    register(routes, A_MASTER, "broker-a", topic("T"), version=V2)
    assert "Old" in routes.get_all_topic_list()
    assert routes.delete_topic("Old")
    assert routes.pickup_topic_route_data("Old") is None
    assert not routes.delete_topic("Old")


def test_delete_topic_in_one_cluster_keeps_the_other_clusters_queues() -> None:
    routes, _ = table()
    register(routes, A_MASTER, "broker-a", topic("T"))
    register(routes, B_MASTER, "broker-b", topic("T"), cluster="C2")
    assert routes.delete_topic("T", "C1")
    route = routes.pickup_topic_route_data("T")
    assert route is not None and [q.broker_name for q in route.queue_datas] == ["broker-b"]
    assert not routes.delete_topic("T", "unknown")
    assert routes.delete_topic("T", "C2")
    assert "T" not in routes.get_all_topic_list()


def test_unregister_takes_the_brokers_topics_and_empty_cluster_along() -> None:
    routes, _ = table()
    register(routes, A_MASTER, "broker-a", topic("T"), topic("OnlyA"))
    register(routes, A_SLAVE, "broker-a", broker_id=1)
    register(routes, B_MASTER, "broker-b", topic("T"), cluster="C2")
    routes.unregister_broker("C1", A_MASTER, "broker-a", 0)
    assert routes.pickup_topic_route_data("OnlyA") is not None  # the slave still serves it
    routes.unregister_broker("C1", A_SLAVE, "broker-a", 1)
    assert routes.pickup_topic_route_data("OnlyA") is None
    route = routes.pickup_topic_route_data("T")
    assert route is not None and [b.broker_name for b in route.broker_datas] == ["broker-b"]
    info = routes.get_all_cluster_info()
    assert info.cluster_addr_table == {"C2": ["broker-b"]}
    assert list(info.broker_addr_table) == ["broker-b"]
    assert A_MASTER not in routes.broker_live_table


def test_unregistering_an_address_the_id_no_longer_has_leaves_the_broker() -> None:
    routes, _ = table()
    register(routes, A_MASTER, "broker-a", topic("T"))
    routes.unregister_broker("C1", A_SLAVE, "broker-a", 0)  # id 0 is A_MASTER's
    assert routes.broker_addr_table["broker-a"].broker_addrs == {0: A_MASTER}
    assert routes.pickup_topic_route_data("T") is not None
    routes.unregister_broker("C9", A_MASTER, "broker-a", 0)  # any cluster name: found by name
    assert routes.get_all_cluster_info().cluster_addr_table == {}
    assert routes.pickup_topic_route_data("T") is None


def test_expiry_forgets_only_brokers_silent_for_longer_than_the_expiry() -> None:
    routes, clock = table()
    register(routes, A_MASTER, "broker-a", topic("T"))
    clock.now = 60
    register(routes, B_MASTER, "broker-b", topic("T"))
    clock.now = 120
    assert routes.scan_not_active_broker() == []  # exactly 120 s: not yet (4.9's `<`)
    clock.now = 120.5
    assert routes.scan_not_active_broker() == [A_MASTER]
    route = routes.pickup_topic_route_data("T")
    assert route is not None and [b.broker_name for b in route.broker_datas] == ["broker-b"]
    clock.now = 181
    assert routes.scan_not_active_broker() == [B_MASTER]
    assert routes.get_all_topic_list() == frozenset()
    assert routes.get_all_cluster_info().cluster_addr_table == {}


def test_closing_the_registration_connection_forgets_that_broker_only() -> None:
    routes, _ = table()
    register(routes, A_MASTER, "broker-a", topic("T"), conn_id=7)
    register(routes, B_MASTER, "broker-b", topic("T"), conn_id=8)
    register(routes, A_MASTER, "broker-a", topic("T"), conn_id=9)  # now on a newer connection
    assert routes.on_connection_closed(7) == []
    assert routes.on_connection_closed(8) == [B_MASTER]
    route = routes.pickup_topic_route_data("T")
    assert route is not None and [b.broker_name for b in route.broker_datas] == ["broker-a"]


def test_wipe_and_add_write_perm_count_the_brokers_topics() -> None:
    routes, _ = table()
    register(routes, A_MASTER, "broker-a", topic("T"), topic("U", perm=PERM_READ | PERM_WRITE))
    register(routes, B_MASTER, "broker-b", topic("T"))
    assert routes.operate_write_perm_of_broker("broker-a", wipe=True) == 2
    route = routes.pickup_topic_route_data("T")
    assert route is not None and [q.perm for q in route.queue_datas] == [PERM_READ, 6]
    assert routes.operate_write_perm_of_broker("broker-a", wipe=False) == 2
    route = routes.pickup_topic_route_data("T")
    assert route is not None and [q.perm for q in route.queue_datas] == [6, 6]
    assert routes.operate_write_perm_of_broker("nobody", wipe=True) == 0


@pytest.mark.parametrize(
    ("addr", "name", "cluster", "what"),
    [
        ("10.9.9.9:1", "broker-a", "C1", "broker addresses"),
        (A_MASTER, "broker-z", "C1", "broker names"),
        (A_MASTER, "broker-a", "C9", "clusters"),
    ],
)
def test_max_brokers_refuses_before_anything_changes(
    addr: str, name: str, cluster: str, what: str
) -> None:
    routes, _ = table(max_brokers=1)
    register(routes, A_MASTER, "broker-a", topic("T"))
    before = (
        dict(routes.broker_live_table),
        {k: dict(v.broker_addrs) for k, v in routes.broker_addr_table.items()},
        {k: set(v) for k, v in routes.cluster_addr_table.items()},
        routes.get_all_topic_list(),
    )
    with pytest.raises(HeaderFieldError, match=f"holds 1 {what} already"):
        register(routes, addr, name, topic("New"), cluster=cluster)
    after = (
        dict(routes.broker_live_table),
        {k: dict(v.broker_addrs) for k, v in routes.broker_addr_table.items()},
        {k: set(v) for k, v in routes.cluster_addr_table.items()},
        routes.get_all_topic_list(),
    )
    assert after == before
    register(routes, A_MASTER, "broker-a", topic("T"))  # the known broker still registers


async def test_the_scan_task_expires_a_broker_at_the_first_scan_past_the_expiry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = NamesrvConfig(broker_expired_s=30, scan_interval_s=7, kv_config_path="unused")
    routes = RouteInfoManager(broker_expired_s=30, max_brokers=4, clock=trio.current_time)
    server = NamesrvServer(config, routes, KVConfigManager("unused", max_entries=1))
    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        register(routes, A_MASTER, "broker-a", topic("T"))
        await nursery.start(server.scan_loop)
        # Scans at 7, 14, 21, 28, 35: the first one later than 30 s after the registration.
        await trio.sleep_until(start + 34.99)
        assert A_MASTER in routes.broker_live_table
        await trio.sleep_until(start + 35.01)
        assert A_MASTER not in routes.broker_live_table
        nursery.cancel_scope.cancel()
    assert routes.pickup_topic_route_data("T") is None
