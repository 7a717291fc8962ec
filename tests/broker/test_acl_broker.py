"""The ACL in the running broker: the client stub signs, the broker checks before dispatch, and a
refused send stores nothing (checked with `store.reader`)."""

from __future__ import annotations

import pathlib

import pytest
import trio
from structlog.testing import capture_logs

from broker.config import ConfigError
from protocol.codes import ResponseCode
from rmq_client.producer import Message, SendError, SessionCredentials, open_producer
from store.reader import CommitLogReader
from tests.conftest import RunningBroker, make_config, start_broker

ACL = """
accounts:
  - accessKey: producer1
    secretKey: "producer-secret"
    defaultTopicPerm: DENY
    topicPerms: ["Orders=PUB", "Audit=SUB"]
"""
GOOD = SessionCredentials("producer1", "producer-secret")


async def start_acl_broker(nursery: trio.Nursery, tmp_path: pathlib.Path) -> RunningBroker:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL)
    config = make_config(tmp_path / "store", acl_enable=True, acl_file=str(acl_file))
    return await start_broker(nursery, config)


async def test_signed_sends_pass_and_refused_ones_store_nothing(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_acl_broker(nursery, tmp_path)
    attempts = [
        (GOOD, "Audit", "No default permission for topic:Audit"),
        (GOOD, "Elsewhere", "No default permission for topic:Elsewhere"),
        (SessionCredentials("producer1", "guessed-secret"), "Orders", "Check signature failed"),
        (SessionCredentials("nobody-here", "producer-secret"), "Orders", "Check signature failed"),
        (None, "Orders", "No accessKey is configured"),
    ]
    with trio.fail_after(20):
        async with open_producer("127.0.0.1", broker.port, credentials=GOOD) as producer:
            ok = await producer.send(Message("Orders", b"signed-1"))
            batch = await producer.send_batch([Message("Orders", b"b1"), Message("Orders", b"b2")])
            assert await producer.get_route("Orders")  # name-server lookups need no signature
        for credentials, topic, remark in attempts:
            async with open_producer("127.0.0.1", broker.port, credentials=credentials) as other:
                with pytest.raises(SendError) as refused:
                    await other.send(Message(topic, b"must-not-be-stored"))
                assert refused.value.code == ResponseCode.NO_PERMISSION
                assert (refused.value.remark or "").startswith(remark)
                assert "secret" not in (refused.value.remark or "")
                await other.send_oneway(Message(topic, b"must-not-be-stored"))
                # The connection stays usable after a refusal.
                assert (await other.get_route("Orders")).queue_datas
                if credentials is GOOD:
                    await other.heartbeat()
                else:
                    with pytest.raises(SendError, match="NO_PERMISSION"):
                        await other.heartbeat()
    assert ok.status.value == batch.status.value == "SEND_OK"
    await broker.stop()
    with CommitLogReader(broker.config.store.store_path_root_dir) as reader:
        stored = [(r.topic, r.body) for r in reader.iter_records(reader.min_offset)]
    assert stored == [("Orders", b"signed-1"), ("Orders", b"b1"), ("Orders", b"b2")]


async def test_acl_off_ignores_signatures(nursery: trio.Nursery, tmp_path: pathlib.Path) -> None:
    broker = await start_broker(nursery, make_config(tmp_path / "store"))
    async with open_producer(
        "127.0.0.1", broker.port, credentials=SessionCredentials("anyone1", "anything")
    ) as producer:
        assert (await producer.send(Message("Free", b"x"))).queue_offset == 0
    await broker.stop()


def test_acl_enable_needs_a_file(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match="acl_file"):
        make_config(tmp_path, acl_enable=True)
    config = make_config(tmp_path, acl_enable="true", acl_file="/etc/acl.yml")
    assert config.acl_enable and config.acl_file == "/etc/acl.yml"


async def test_an_acl_refusal_is_logged_by_the_validator_alone(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_acl_broker(nursery, tmp_path)
    with capture_logs() as logs:
        async with open_producer("127.0.0.1", broker.port, credentials=GOOD) as producer:
            with pytest.raises(SendError):
                await producer.send(Message("Audit", b"no-permission"))
            await producer.send(Message("Orders", b"creates-the-topic"))
            with pytest.raises(SendError):
                await producer.send(Message("Orders", b"no-such-queue", queue_id=1000))
    events = [e["event"] for e in logs if e["event"] in ("acl_denied", "request_refused")]
    # The ACL refusal is the validator's event; the processor's refusal is the connection's.
    assert events == ["acl_denied", "request_refused"]
    await broker.stop()
