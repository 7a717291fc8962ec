"""The official C++ client (`rocketmq==0.4.4`) against a cluster of real processes on loopback:
two `rmq-broker namesrv` and three `rmq-broker serve` (broker-a, -b, -c) registered with both
through `namesrv_addr`. The clients are given only the name servers' addresses.

A new topic is created by the sends on every broker (4.9's TBW102 rule: the producer spreads
over the template's route, each broker creates the topic and registers it) so the next route
lists all three, the same from either name server. A push consumer group of two members gets
every message once. A broker killed leaves the routes and the producer goes on with the
others; restarted, it comes back; a broker that stops registering expires. With one name
server killed, clients and brokers carry on with the other. The tests run in order on one
cluster.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterable

import trio
from rocketmq.client import Message, Producer, PushConsumer, RecvMessage, SendStatus
from rocketmq.exceptions import ProducerSendSyncFailed

from protocol.route import TopicRouteData
from rmq_client.pull_consumer import open_pull_consumer
from tests.cluster.cluster import BROKER_NAMES, Cluster, broker_names
from tests.integration.cpp_producer import shutdown_clear_of_route_refresh

TOPIC = "ClusterTopic"
FIRST = 60
#: the brokers tell the members that the group changed (NOTIFY_CONSUMER_IDS_CHANGED) and they
#: rebalance at once, not on their 10 s timer: long enough for that round trip
REBALANCE_WAIT_S = 1


def produce(namesrv_addr: str, indexes: Iterable[int]) -> None:
    producer = Producer("cluster_producer", timeout=5000)
    producer.set_namesrv_addr(namesrv_addr)
    producer.start()
    producer_started = time.monotonic()
    try:
        for index in indexes:
            msg = Message(TOPIC)
            msg.set_keys(f"key-{index}")
            msg.set_property("seq", str(index))
            msg.set_body(f"cluster-{index}".encode())
            assert send(producer, msg) == SendStatus.OK
    finally:
        shutdown_clear_of_route_refresh(producer, producer_started)


def send(producer: Producer, msg: Message) -> SendStatus:
    """`send_sync`, tried again when the client gave up before sending anything: just after
    its start, the C++ client's sending thread can lose the race for its own connection table
    to its heartbeat thread ("GetTransport ... get timed_mutex timeout" in its log) and fail
    every broker at once. A message the broker stored twice would show in the counts."""
    for attempt in range(3):
        try:
            return producer.send_sync(msg).status
        except ProducerSendSyncFailed as exc:
            if "No route info" not in str(exc) or attempt == 2:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


async def _held(port: int) -> int:
    async with open_pull_consumer("127.0.0.1", port, "cluster_check") as check:
        return sum([await check.max_offset(TOPIC, queue_id) for queue_id in range(4)])


def held(cluster: Cluster, name: str) -> int:
    """How many messages of TOPIC broker `name` holds (the topic has 4 queues on each)."""
    return trio.run(_held, cluster.brokers[name].port)


def wait_held(cluster: Cluster, names: Iterable[str], total: int) -> dict[str, int]:
    """Per broker, what it holds once `names` hold `total` together (a send is answered
    before its consume queue entry is written)."""
    deadline = time.monotonic() + 10
    while True:
        counts = {name: held(cluster, name) for name in names}
        if sum(counts.values()) >= total or time.monotonic() > deadline:
            return counts
        time.sleep(0.1)


def full_route(route: TopicRouteData | None) -> bool:
    return broker_names(route) == set(BROKER_NAMES)


def test_sends_land_on_every_broker_and_both_name_servers_route_to_all(
    cluster: Cluster, client_home: object
) -> None:
    assert cluster.route(0, TOPIC) is None  # no broker has it yet
    produce(cluster.namesrv_addr, range(FIRST))
    counts = wait_held(cluster, BROKER_NAMES, FIRST)
    assert sum(counts.values()) == FIRST and all(counts.values()), counts
    first, second = cluster.wait_route(TOPIC, full_route, timeout_s=10)
    assert first == second
    assert first is not None
    assert {(q.read_queue_nums, q.write_queue_nums, q.perm) for q in first.queue_datas} == {
        (4, 4, 6)
    }
    addrs = {b.broker_name: b.broker_addrs for b in first.broker_datas}
    assert addrs == {name: {0: cluster.broker_addr(name)} for name in BROKER_NAMES}
    infos = [cluster.cluster_info(index) for index in (0, 1)]
    assert infos[0] == infos[1]
    assert infos[0].cluster_addr_table == {"DefaultCluster": sorted(BROKER_NAMES)}
    print(f"messages per broker: {counts}")


class Received:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[tuple[int, str]] = []

    def member(self, name: str) -> object:
        def on_message(msg: RecvMessage) -> None:
            with self.lock:
                self.rows.append((int(msg.get_property("seq")), name))

        return on_message

    def seqs(self) -> list[int]:
        with self.lock:
            return [seq for seq, _ in self.rows]

    def wait_for(self, wanted: set[int], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not wanted <= set(self.seqs()):
            missing = sorted(wanted - set(self.seqs()))
            assert time.monotonic() < deadline, f"never delivered: {missing[:20]}"
            time.sleep(0.1)


def test_a_push_group_of_two_gets_every_message_once(cluster: Cluster, client_home: object) -> None:
    received = Received()
    members = []
    for name in ("member-1", "member-2"):
        consumer = PushConsumer("cluster_push_group")
        consumer.set_namesrv_addr(cluster.namesrv_addr)
        consumer.set_instance_name(name)
        consumer.set_thread_count(2)
        consumer.subscribe(TOPIC, received.member(name))
        consumer.start()
        consumer_started = time.monotonic()
        members.append(consumer)
    try:
        received.wait_for(set(range(FIRST)), 40)  # what was there: at least once
        time.sleep(REBALANCE_WAIT_S)
        with received.lock:
            received.rows.clear()
        produce(cluster.namesrv_addr, range(FIRST, 2 * FIRST))
        received.wait_for(set(range(FIRST, 2 * FIRST)), 40)
        time.sleep(1)  # a duplicate would come within the pull's round trip
    finally:
        for consumer in members:
            shutdown_clear_of_route_refresh(consumer, consumer_started)
    seqs = received.seqs()
    assert sorted(seqs) == list(range(FIRST, 2 * FIRST)), "a message came twice"
    by_member = {name for _, name in received.rows}
    assert by_member == {"member-1", "member-2"}, "one member got every queue"


def test_a_killed_broker_leaves_the_routes_and_comes_back(
    cluster: Cluster, client_home: object
) -> None:
    before = {name: held(cluster, name) for name in ("broker-a", "broker-b")}
    cluster.brokers["broker-c"].kill()
    cluster.wait_route(TOPIC, lambda r: broker_names(r) == {"broker-a", "broker-b"})
    produce(cluster.namesrv_addr, range(2 * FIRST, 2 * FIRST + 30))
    after = wait_held(cluster, before, sum(before.values()) + 30)
    assert sum(after.values()) - sum(before.values()) == 30
    cluster.start_broker("broker-c")  # the same store: the topic is still there
    cluster.wait_route(TOPIC, full_route)
    assert held(cluster, "broker-c") > 0


def test_a_broker_that_stops_registering_expires_and_returns(cluster: Cluster) -> None:
    """SIGSTOP keeps its connections open: only the name servers' expiry can remove it."""
    broker = cluster.brokers["broker-b"]
    os.kill(broker.process.pid, signal.SIGSTOP)
    try:
        cluster.wait_route(TOPIC, lambda r: broker_names(r) == {"broker-a", "broker-c"})
    finally:
        os.kill(broker.process.pid, signal.SIGCONT)
    cluster.wait_route(TOPIC, full_route)
    for namesrv in cluster.namesrvs:
        assert namesrv.wait_for("broker_expired", 10)["broker_addr"] == cluster.broker_addr(
            "broker-b"
        )


def test_with_one_name_server_killed_clients_and_brokers_carry_on(
    cluster: Cluster, client_home: object
) -> None:
    before = sum(held(cluster, name) for name in BROKER_NAMES)
    cluster.namesrvs[0].process.kill()
    cluster.namesrvs[0].process.wait(30)
    dead = cluster.namesrvs[0].addr
    for broker in cluster.brokers.values():
        while broker.wait_for("namesrv_lost", 30)["namesrv"] != dead:
            pass  # an earlier loss of another kind (broker-b was stopped for seconds)
    produce(cluster.namesrv_addr, range(3 * FIRST, 3 * FIRST + 30))
    assert sum(wait_held(cluster, BROKER_NAMES, before + 30).values()) - before == 30
    assert full_route(cluster.route(1, TOPIC))
    for broker in cluster.brokers.values():
        broker.drain()
        # one event for the loss, none per failed reconnection
        lost = [e for e in broker.events if e.get("event") == "namesrv_lost"]
        assert [e["namesrv"] for e in lost].count(dead) == 1
