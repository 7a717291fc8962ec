"""A broker registers with another broker's embedded name-server role, not with a standalone
name server, and the official C++ client (`rocketmq==0.4.4`), given only the first broker's
address, spreads a new topic over both and reads every message back.

broker-a runs as today (its own name server); broker-b has `namesrv_addr` = broker-a. The
route broker-a answers for a topic nobody has yet offers its own queues and broker-b's (from
broker-b's inheritable TBW102), so the first sends create the topic on both; broker-b's next
registration makes the route list both as they are. broker-b killed: its connection closes and
broker-a's routes drop it at once. (The messages are read back with the project's client: the
C++ binding's `PullConsumer.pull` keeps one offset per topic and queue id, whatever the broker,
so it cannot read a topic that two brokers hold.)
"""

from __future__ import annotations

import pathlib

import pytest
import trio

from protocol.codes import ResponseCode
from protocol.properties import decode_properties
from protocol.route import TopicRouteData
from rmq_client.producer import Message, SendError
from rmq_client.pull_consumer import open_pull_consumer
from tests.cluster.cluster import PERIOD_MS, _call, broker_names
from tests.daemon import Daemon
from tests.integration import cpp_producer
from tests.namesrv.fake_broker import route_request

TOPIC = "ViaEmbeddedRole"
COUNT = 40


def route(port: int) -> TopicRouteData | None:
    answer = trio.run(_call, port, route_request(TOPIC))
    if answer.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return TopicRouteData.from_json(answer.body or b"{}")


async def read_back(route: TopicRouteData) -> dict[int, bytes]:
    """Every message of TOPIC on every broker the route names, at the address it gives; and a
    pull and a send for a queue id past the broker's four, refused as 4.9 refuses them."""
    bodies: dict[int, bytes] = {}
    for data in route.broker_datas:
        host, _, port = data.broker_addrs[0].rpartition(":")
        async with open_pull_consumer(host, int(port), "embedded_reader") as reader:
            for queue_id in range(4):
                result = await reader.pull(TOPIC, queue_id, 0, expression="*")
                for record in result.records:
                    seq = int(decode_properties(record.properties)["seq"])
                    bodies[seq] = record.body or b""
            with pytest.raises(SendError) as pulled:
                await reader.pull(TOPIC, 4, 0, expression="*")
            assert pulled.value.code == ResponseCode.SYSTEM_ERROR
            assert (pulled.value.remark or "").startswith(
                f"queueId[4] is illegal, topic:[{TOPIC}] topicConfig.readQueueNums:[4] consumer:[/"
            )
            with pytest.raises(SendError) as sent:
                await reader.connection.send(Message(TOPIC, b"x", queue_id=4))
            assert sent.value.code == ResponseCode.SYSTEM_ERROR
            assert (sent.value.remark or "").startswith("request queueId[4] is illegal")
    return bodies


def test_a_broker_registered_with_another_brokers_name_server_role(
    tmp_path: pathlib.Path, client_home: pathlib.Path
) -> None:
    first = Daemon(tmp_path / "a")
    second = Daemon(
        tmp_path / "b",
        env={
            "RMQ_BROKER_NAME": "broker-b",
            "RMQ_NAMESRV_ADDR": f"127.0.0.1:{first.port}",
            "RMQ_REGISTER_NAME_SERVER_PERIOD": PERIOD_MS,
        },
    )
    try:
        second.wait_for("namesrv_registered")
        offered = route(first.port)
        assert broker_names(offered) == {"broker-a", "broker-b"}
        cpp_producer.produce(
            first.port, TOPIC, "embedded_producer", range(COUNT), lambda i: f"e-{i}".encode()
        )
        created = [e for e in second.events if e.get("event") == "topic_created"]
        second.drain()
        created += [e for e in second.events if e.get("event") == "topic_created"]
        assert any(e.get("topic") == TOPIC for e in created), "no send reached broker-b"
        full = route(first.port)
        assert full is not None and broker_names(full) == {"broker-a", "broker-b"}
        pulled = trio.run(read_back, full)
        assert pulled == {i: f"e-{i}".encode() for i in range(COUNT)}
        second.kill()
        assert broker_names(route(first.port)) == {"broker-a"}
    finally:
        if second.process.poll() is None:
            second.stop()
        assert first.stop() == 0
