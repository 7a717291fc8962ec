"""The routed pull consumer follows `suggestWhichBrokerId` over real processes: a master with
`slave_read_enable` and a 0 % memory ratio suggests its slave after the first pull, so the next
pull is served by the slave even with the master frozen (SIGSTOP), while the offset commit still
goes to the master the route lists, and fails."""

from __future__ import annotations

import pathlib
import signal
import time

import pytest
import trio

from protocol.route import TopicRouteData
from rmq_client.blocking import BlockingProducer
from rmq_client.producer import Message, SendStatus
from rmq_client.routed_consumer import BrokerUnreachableError, open_routed_consumer
from tests.cluster.cluster import Cluster
from tests.ha.conftest import Daemon, segment_bytes
from tests.ha.test_namesrv_pairing import pair_env

TOPIC = "RoutedSuggest"
READ_SLAVE = {"RMQ_SLAVE_READ_ENABLE": "true", "RMQ_ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO": "0"}


async def pull_twice(namesrv: str, master: Daemon) -> list[bytes]:
    bodies: list[bytes] = []
    with trio.fail_after(30):
        async with open_routed_consumer([namesrv], "SuggestGroup", timeout_s=2) as consumer:
            await consumer.subscribe(TOPIC)
            first = await consumer.pull(TOPIC, "broker-ha", 0, 0, max_nums=1)
            assert first.suggest_which_broker_id == 1
            bodies.extend(r.body or b"" for r in first.records)
            master.process.send_signal(signal.SIGSTOP)
            try:
                second = await consumer.pull(TOPIC, "broker-ha", 0, 1, commit_offset=1)
                bodies.extend(r.body or b"" for r in second.records)
                with pytest.raises(BrokerUnreachableError):
                    await consumer.commit(TOPIC, "broker-ha", 0, 3)
            finally:
                master.process.send_signal(signal.SIGCONT)
    return bodies


def test_pulls_follow_the_suggested_slave(tmp_path: pathlib.Path, daemons: list[Daemon]) -> None:
    cluster = Cluster(tmp_path / "cluster", namesrvs=1)
    try:
        env = {**pair_env(cluster, "ASYNC_MASTER", 0), **READ_SLAVE}
        master = Daemon(tmp_path / "master", env=env)
        daemons.append(master)
        with BlockingProducer("127.0.0.1", master.port) as client:
            for i in range(3):
                sent = client.send(Message(TOPIC, b"m%d" % i, queue_id=0))
                assert sent.status is SendStatus.SEND_OK
        slave = Daemon(tmp_path / "slave", env=pair_env(cluster, "SLAVE", 1))
        daemons.append(slave)
        slave.event("slave_synced")  # the topic, copied from the master
        deadline = time.monotonic() + 30
        while segment_bytes(tmp_path / "slave") != segment_bytes(tmp_path / "master"):
            assert time.monotonic() < deadline, "the slave never caught up"
            time.sleep(0.1)

        def both(route: TopicRouteData | None) -> bool:
            datas = () if route is None else route.broker_datas
            return any(set(data.broker_addrs) == {0, 1} for data in datas)

        cluster.wait_route(TOPIC, both, namesrvs=(0,))
        assert trio.run(pull_twice, cluster.namesrv_addr, master) == [b"m0", b"m1", b"m2"]
    finally:
        cluster.stop()
