"""A master and a slave that know only a name server: both register under one broker name, the
route lists them by broker id, and the slave finds its master's HA port (a free port, not the
listen port + 1) in its registration's answer and copies the master's commit log."""

from __future__ import annotations

import pathlib
import time

from protocol.route import TopicRouteData
from rmq_client.blocking import BlockingProducer
from rmq_client.producer import Message, SendStatus
from tests.cluster.cluster import Cluster
from tests.ha.conftest import Daemon, segment_bytes


def pair_env(cluster: Cluster, role: str, broker_id: int) -> dict[str, str]:
    return {
        "RMQ_NAMESRV_ADDR": cluster.namesrv_addr,
        "RMQ_BROKER_NAME": "broker-ha",
        "RMQ_BROKER_ID": str(broker_id),
        "RMQ_BROKER_ROLE": role,
        "RMQ_REGISTER_NAME_SERVER_PERIOD": "1000",
        "RMQ_HA_SEND_HEARTBEAT_INTERVAL": "200",
    }


def test_a_slave_finds_its_master_through_the_name_server(
    tmp_path: pathlib.Path, daemons: list[Daemon]
) -> None:
    cluster = Cluster(tmp_path / "cluster", namesrvs=1)
    try:
        master = Daemon(tmp_path / "master", env=pair_env(cluster, "SYNC_MASTER", 0))
        daemons.append(master)
        ha_port = int(str(master.event("ha_listening")["port"]))
        assert ha_port != master.port + 1  # listening on port 0: the HA port is any free one
        slave = Daemon(tmp_path / "slave", env=pair_env(cluster, "SLAVE", 1))
        daemons.append(slave)
        slave.event("ha_master_connected")
        with BlockingProducer("127.0.0.1", master.port) as client:
            for i in range(50):
                sent = client.send(Message("PairTopic", b"%04d" % i))
                assert sent.status == SendStatus.SEND_OK  # SYNC_MASTER: the slave has it
        addrs = {0: f"127.0.0.1:{master.port}", 1: f"127.0.0.1:{slave.port}"}

        def listed(route: TopicRouteData | None) -> bool:
            datas = () if route is None else route.broker_datas
            return any(data.broker_addrs == addrs for data in datas)

        cluster.wait_route("PairTopic", listed, namesrvs=(0,))
        deadline = time.monotonic() + 30
        while segment_bytes(tmp_path / "slave") != segment_bytes(tmp_path / "master"):
            assert time.monotonic() < deadline, "the slave never caught up"
            time.sleep(0.2)
        assert slave.stop() == 0
        assert master.stop() == 0
    finally:
        cluster.stop()
