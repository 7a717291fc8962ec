"""A slave serves what it copied: pulls of the master's messages, and the consumer offsets,
topics and groups it takes over from the master's broker port (4.9's SlaveSynchronize). It
runs no delayed delivery of its own (it would try to store what its master delivers)."""

from __future__ import annotations

import json
import pathlib

import trio

from protocol.codes import ResponseCode
from rmq_client.admin_groups import get_all_subscription_groups
from rmq_client.producer import Message, SendStatus, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from tests.ha.conftest import Daemon, start_master, start_slave

TOPIC = "HaReads"
GROUP = "HaReadsGroup"


async def test_a_slave_serves_pulls_offsets_and_topics_copied_from_its_master(
    tmp_path: pathlib.Path, daemons: list[Daemon]
) -> None:
    master, ha_port = start_master(
        tmp_path / "master", daemons, {"RMQ_BROKER_ROLE": "ASYNC_MASTER"}
    )
    bodies = [b"body-%d" % i for i in range(20)]
    with trio.fail_after(60):
        async with open_producer("127.0.0.1", master.port) as producer:
            for body in bodies:
                result = await producer.send(Message(TOPIC, body, queue_id=0))
                assert result.status is SendStatus.SEND_OK
            # due in 1 s: the master delivers it; a slave stores nothing of its own
            await producer.send(Message("HaLater", b"due", delay_level=1, queue_id=0))
        async with open_pull_consumer("127.0.0.1", master.port, GROUP) as consumer:
            await consumer.subscribe(TOPIC)
            await consumer.commit(TOPIC, 0, 7)
            later = await consumer.pull("HaLater", 0, 0, expression="*", suspend_ms=5000)
            assert later.found  # the master delivered it: its level's offset is 1
    slave = start_slave(
        tmp_path / "slave",
        daemons,
        ha_port,
        {"RMQ_HA_MASTER_BROKER_ADDRESS": f"127.0.0.1:{master.port}"},
    )
    slave.event("slave_synced")
    with trio.fail_after(60):
        async with open_pull_consumer("127.0.0.1", slave.port, GROUP) as consumer:
            assert await consumer.committed(TOPIC, 0) == 7
            await consumer.subscribe(TOPIC)
            got: list[bytes] = []
            while len(got) < len(bodies):
                found = await consumer.pull(TOPIC, 0, len(got), suspend_ms=1000)
                if found.code == ResponseCode.SUCCESS:
                    got.extend(r.body or b"" for r in found.records)
            assert got == bodies
            groups = await get_all_subscription_groups(consumer.connection)
            assert GROUP in groups.table
        await trio.sleep(2.5)  # the delayed message is due, twice over
    assert slave.count("delayed_delivery_failed") == 0
    delay_offsets = json.loads((tmp_path / "slave" / "config" / "delayOffset.json").read_text())
    assert delay_offsets["offsetTable"]["1"] == 1  # the master's, where it delivered
