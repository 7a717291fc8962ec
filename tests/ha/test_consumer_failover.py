"""When the master is gone consumers continue from the slave: a name server, a SYNC_MASTER +
SYNC_FLUSH master and its SLAVE registered under one broker name, producers under load until
the master's SIGKILL at a random moment. Then

- the project's routed pull consumer (`rmq_client.routed_consumer`, 4.9's rules for picking an
  address), holding the route from before the kill, fails one pull per queue on the dead
  master, asks for the route again and pulls every queue from the slave: every acknowledged
  message is there at its queue offset with its body; it commits its offsets to the slave and
  reads them back;
- the official C++ push consumer, given only the name server, delivers everything the slave
  holds and commits its offsets to the slave. In the normal run it starts after the kill; under
  `RMQ_SOAK=1` (5 kills on fresh processes) every other kill lands while it is consuming from
  the master, and it moves to the slave on its next route refresh (30 s in the C++ client).
"""

from __future__ import annotations

import pathlib
import random
import threading
import time

import trio
from rocketmq.client import PushConsumer, RecvMessage

from protocol.route import TopicRouteData
from rmq_client.blocking import BlockingProducer
from rmq_client.producer import Message, SendStatus
from rmq_client.pull_consumer import open_pull_consumer
from rmq_client.routed_consumer import BrokerUnreachableError, open_routed_consumer
from tests.cluster.cluster import Cluster
from tests.ha.conftest import SOAK, Daemon
from tests.ha.test_namesrv_pairing import pair_env
from tests.reliability.acks import Ack
from tests.reliability.test_crash_cycles import TOPICS, load_until_killed

SYNC = {"RMQ_FLUSH_DISK_TYPE": "SYNC_FLUSH"}
GROUP = "FailoverGroup"
CPP_GROUP = "FailoverCppGroup"


async def consume_all(
    namesrv: str, before: dict[int, str]
) -> tuple[dict[tuple[str, int, int], bytes], int]:
    """Every message of `TOPICS` by (topic, queue, queue offset), pulled through the route;
    and how many pulls failed before the route let go of the master."""
    with trio.fail_after(60):
        return await _consume(namesrv, before, {})


async def _consume(
    namesrv: str, before: dict[int, str], got: dict[tuple[str, int, int], bytes]
) -> tuple[dict[tuple[str, int, int], bytes], int]:
    failed = 0
    async with open_routed_consumer([namesrv], GROUP, timeout_s=3) as consumer:
        for topic in TOPICS:
            await consumer.subscribe(topic)
            for broker_name, queue_id in await consumer.queues(topic):
                # a consumer that learned the route before the kill still lists the master
                consumer.broker_addrs[broker_name] = dict(before)
                offset = 0
                while True:
                    try:
                        result = await consumer.pull(topic, broker_name, queue_id, offset)
                    except BrokerUnreachableError:
                        failed += 1  # the dead master; the route is asked for again
                        await trio.sleep(0.2)
                        continue
                    for record in result.records:
                        got[(topic, queue_id, record.queue_offset)] = record.body or b""
                    offset = result.next_begin_offset
                    if offset >= result.max_offset:  # the queue's end, as the slave has it
                        break
                await consumer.commit(topic, broker_name, queue_id, offset)
                assert await consumer.committed(topic, broker_name, queue_id) == offset
        assert set(consumer.broker_addrs["broker-ha"]) == {1}  # the route lists the slave only
    return got, failed


class CppReceived:
    """What the C++ push consumer delivered, by (topic, queue, queue offset)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.got: dict[tuple[str, int, int], bytes] = {}

    def __call__(self, msg: RecvMessage) -> None:
        with self.lock:
            self.got[(msg.topic, msg.queue_id, msg.queue_offset)] = msg.body


def start_cpp_consumer(namesrv: str, received: CppReceived) -> PushConsumer:
    """The official C++ push consumer, given only the name server."""
    consumer = PushConsumer(CPP_GROUP)
    consumer.set_namesrv_addr(namesrv)
    consumer.set_thread_count(2)
    for topic in TOPICS:
        consumer.subscribe(topic, received)
    consumer.start()
    return consumer


def wait_delivered(received: CppReceived, wanted: set[tuple[str, int, int]]) -> None:
    deadline = time.monotonic() + 60
    while True:
        with received.lock:
            missing = wanted - set(received.got)
        if not missing:
            return
        assert time.monotonic() < deadline, f"C++ consumer never got {sorted(missing)[:5]}"
        time.sleep(0.2)


async def committed_on(
    port: int, group: str, queues: list[tuple[str, int]]
) -> dict[tuple[str, int], int | None]:
    async with open_pull_consumer("127.0.0.1", port, group, client_id="check@0") as check:
        return {(t, q): await check.committed(t, q) for t, q in queues}


def one_kill(
    root: pathlib.Path, daemons: list[Daemon], rng: random.Random, cpp_across: bool
) -> tuple[int, int]:
    """One kill; the C++ consumer runs across it (`cpp_across`) or starts after it."""
    cluster = Cluster(root / "cluster", namesrvs=1)
    try:
        master = Daemon(root / "master", env={**pair_env(cluster, "SYNC_MASTER", 0), **SYNC})
        daemons.append(master)
        with BlockingProducer("127.0.0.1", master.port) as client:
            for topic in TOPICS:  # the topics exist before the slave copies the master's
                sent = client.send(Message(topic, b"first"))
                assert sent.status is SendStatus.SLAVE_NOT_AVAILABLE  # stored, not replicated
        slave = Daemon(root / "slave", env={**pair_env(cluster, "SLAVE", 1), **SYNC})
        daemons.append(slave)
        slave.event("ha_master_connected")
        slave.event("slave_synced")  # a slave serves pulls only of topics it knows

        def both(route: TopicRouteData | None) -> bool:
            datas = () if route is None else route.broker_datas
            return any(set(data.broker_addrs) == {0, 1} for data in datas)

        for topic in TOPICS:
            (route,) = cluster.wait_route(topic, both, namesrvs=(0,))
        assert route is not None
        before = dict(route.broker_datas[0].broker_addrs)
        received = CppReceived()
        cpp = start_cpp_consumer(cluster.namesrv_addr, received) if cpp_across else None
        try:
            acks: dict[int, Ack] = trio.run(load_until_killed, master, 0, rng)
            assert acks, "nothing acknowledged before the kill"
            started = time.monotonic()
            got, failed = trio.run(consume_all, cluster.namesrv_addr, before)
            consume_s = time.monotonic() - started
            # each queue's first pull went to the master of the stale route, and only that one
            assert failed == len({(t, q) for t, q, _ in got}), failed
            missing = [a for a in acks.values() if (a.topic, a.queue_id, a.queue_offset) not in got]
            assert not missing, f"{len(missing)} acknowledged messages not consumed: {missing[:3]}"
            for ack in acks.values():
                assert got[(ack.topic, ack.queue_id, ack.queue_offset)] == ack.body
            if cpp is None:
                cpp = start_cpp_consumer(cluster.namesrv_addr, received)
            wait_delivered(received, set(got))  # everything on the slave, the acknowledged too
            cpp_s = time.monotonic() - started
        finally:
            if cpp is not None:
                cpp.shutdown()
        assert {key: received.got[key] for key in got} == got
        # the C++ client committed what it consumed to the slave (at the latest on shutdown)
        ends = {(t, q): max(o for t2, q2, o in got if (t2, q2) == (t, q)) + 1 for t, q, _ in got}
        assert trio.run(committed_on, slave.port, CPP_GROUP, list(ends)) == ends
        print(
            f"consumer_failover acknowledged={len(acks)} on_slave={len(got)}"
            f" failed_pulls={failed} rmq_client_s={consume_s:.1f} cpp_s={cpp_s:.1f}"
        )
        assert slave.stop() == 0
        return len(acks), len(got)
    finally:
        cluster.stop()


def test_consumers_continue_from_the_slave_when_the_master_is_killed(
    tmp_path: pathlib.Path, daemons: list[Daemon], client_home: pathlib.Path
) -> None:
    """`client_home`: the C++ client in this process keeps its logs under the HOME of the first
    test that starts it (tests/integration/conftest.py)."""
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    print(f"consumer_failover seed={seed}")
    rng.seed(seed)
    for kill in range(5 if SOAK else 1):
        one_kill(tmp_path / f"kill-{kill}", daemons, rng, cpp_across=kill % 2 == 1)
        daemons.clear()
