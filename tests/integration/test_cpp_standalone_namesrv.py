"""The official C++ client (`rocketmq==0.4.4`) finds a broker through a standalone name server.

A real `rmq-broker serve` holds the messages; a fake broker registers that broker's address
with a real `rmq-broker namesrv` over raw remoting frames (as a 4.9 broker would, its
connection kept open). The C++ producer and pull consumer are given only the name server's
address: every message must reach the broker through the route the name server merged, and
be read back through it. A name server that answered a wrong address, queue count or perm
would make the sends fail or the pull come back short.
"""

from __future__ import annotations

import pathlib
import time

import trio
from rocketmq.client import Message, Producer, PullConsumer, SendStatus

from protocol.admin_topic import TopicConfigData
from protocol.codes import ResponseCode
from tests.daemon import Daemon
from tests.integration.cpp_producer import shutdown_clear_of_route_refresh
from tests.namesrv.fake_broker import connect, register_request
from tests.namesrv.process import NamesrvProcess

TOPIC = "CppViaNamesrv"
COUNT = 20


def produce(namesrv_addr: str) -> list[str]:
    producer = Producer("cpp_namesrv_producer", timeout=5000)
    producer.set_namesrv_addr(namesrv_addr)
    producer.start()
    producer_started = time.monotonic()
    try:
        ids = []
        for index in range(COUNT):
            msg = Message(TOPIC)
            msg.set_keys(f"key-{index}")
            msg.set_body(f"via-namesrv-{index}".encode())
            result = producer.send_sync(msg)
            assert result.status == SendStatus.OK
            ids.append(result.msg_id)
        return ids
    finally:
        shutdown_clear_of_route_refresh(producer, producer_started)


def pull(namesrv_addr: str) -> dict[bytes, int]:
    puller = PullConsumer("cpp_namesrv_puller")
    puller.set_namesrv_addr(namesrv_addr)
    puller.start()
    puller_started = time.monotonic()
    try:
        bodies: dict[bytes, int] = {}
        for msg in puller.pull(TOPIC):
            bodies[msg.body] = bodies.get(msg.body, 0) + 1
        return bodies
    finally:
        shutdown_clear_of_route_refresh(puller, puller_started)


async def test_cpp_client_sends_and_pulls_through_a_standalone_name_server(
    tmp_path: pathlib.Path, client_home: pathlib.Path
) -> None:
    broker = Daemon(tmp_path / "store")
    namesrv = NamesrvProcess(tmp_path / "kvConfig.json")
    try:
        async with connect(namesrv.port) as fake_broker:
            topic = TopicConfigData(TOPIC, 4, 4, 6)
            addr = f"127.0.0.1:{broker.port}"
            answer = await fake_broker.call(register_request(addr, "broker-a", (topic,)))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            ids = await trio.to_thread.run_sync(produce, namesrv.addr)
            bodies = await trio.to_thread.run_sync(pull, namesrv.addr)
    finally:
        assert namesrv.stop() == 0
        broker.process.terminate()
        assert broker.finish() == 0
    assert len(set(ids)) == COUNT
    assert bodies == {f"via-namesrv-{i}".encode(): 1 for i in range(COUNT)}
