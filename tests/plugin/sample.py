"""A small application test suite that uses the plugin's fixtures, as another project would.

`SHARED` runs on one session broker (its conftest points `rmq_broker` at `rmq_broker_session`):
the client package, the official C++ client, a test that fails on purpose, a broker that cannot
start. `FACTORY` kills and restarts a broker of its own; each test writes what the outer test
checks afterwards (store paths) into files of its working directory.
"""

from __future__ import annotations

SHARED_CONFTEST = """
import pytest


@pytest.fixture
def rmq_broker(rmq_broker_session):
    return rmq_broker_session
"""

SHARED = """
import pathlib

import pytest
from rocketmq.client import Message as CppMessage, Producer as CppProducer, SendStatus

from broker.client import Message
from rmq_client.broker_process import BrokerStartError


def test_client_package_sends_and_receives(rmq_producer, rmq_consumer, rmq_broker):
    for index in range(3):
        rmq_producer.send(Message("SampleOrders", f"order-{index}".encode(), tags="New"))
    got = rmq_consumer.receive("SampleOrders", count=3, timeout_s=20)
    assert sorted(m.body for m in got) == [b"order-0", b"order-1", b"order-2"]
    assert {m.tags for m in got} == {"New"}
    pathlib.Path("session_store.txt").write_text(str(rmq_broker.store_dir))


def test_official_cpp_client_sends(rmq_broker, rmq_consumer):
    producer = CppProducer("sample_cpp_producer", timeout=5000)
    producer.set_namesrv_addr(rmq_broker.namesrv_addr)
    producer.start()
    try:
        msg = CppMessage("SampleCpp")
        msg.set_keys("cpp-key")
        msg.set_tags("FromCpp")
        msg.set_body(b"sent by the C++ client")
        assert producer.send_sync(msg).status == SendStatus.OK
    finally:
        producer.shutdown()
    (got,) = rmq_consumer.receive("SampleCpp", timeout_s=20)
    assert (got.body, got.tags, got.keys) == (b"sent by the C++ client", "FromCpp", "cpp-key")


def test_fails_on_purpose(rmq_producer):
    rmq_producer.send(Message("ShownInTheReport", b"x"))
    assert 1 == 2


def test_a_broker_that_cannot_start_says_why(rmq_broker_factory):
    with pytest.raises(BrokerStartError, match="unknown configuration") as failure:
        rmq_broker_factory(config={"no_such_key": 1})
    assert "exited with code 2" in str(failure.value)
"""

FACTORY = """
import pathlib

from broker.blocking_client import BlockingProducer
from broker.client import Message
from rmq_client.blocking_consumer import BlockingConsumer


def test_kill_and_restart_keep_the_port_and_the_synced_messages(rmq_broker_factory):
    broker = rmq_broker_factory(flush_disk_type="SYNC_FLUSH")
    address = broker.address
    with BlockingProducer(broker.host, broker.port) as producer:
        producer.send(Message("SampleDurable", b"before the kill"))
    broker.kill()
    assert not broker.running
    broker.restart()
    assert broker.running and broker.address == address
    with BlockingProducer(broker.host, broker.port) as producer:
        producer.send(Message("SampleDurable", b"after the restart"))
    broker.restart()
    with BlockingConsumer(broker.host, broker.port, "sample_durable") as consumer:
        got = consumer.receive("SampleDurable", count=2, timeout_s=20)
    assert sorted(m.body for m in got) == [b"after the restart", b"before the kill"]
    assert sum(1 for e in broker.events() if e.get("event") == "listening") == 3
    pathlib.Path("factory_store.txt").write_text(str(broker.store_dir))
"""

#: ini keys: brokers refuse topics they do not know, and flush synchronously
INI = """
[pytest]
timeout = 120
rmq_broker_config =
    auto_create_topic_enable = false
rmq_flush_disk_type = SYNC_FLUSH
"""

KEEP = """
import pathlib

import pytest

from broker.client import Message, SendError


def test_ini_settings_reach_the_broker(rmq_broker, rmq_producer):
    with pytest.raises(SendError, match="not exist"):
        rmq_producer.send(Message("NeverCreated", b"x"))
    (startup,) = [e for e in rmq_broker.events() if e.get("event") == "startup"]
    assert startup["flush_disk_type"] == "SYNC_FLUSH"
    pathlib.Path("kept_store.txt").write_text(str(rmq_broker.store_dir))
"""
