"""The official RocketMQ 5 Python client's producer against a real broker, read back with the
project's 4.x pull consumer: normal, FIFO, delayed and transactional sends (commit, rollback
and a check answered through Telemetry), each stored with the properties a 4.x consumer reads."""

from __future__ import annotations

import pathlib

import trio

from protocol.properties import decode_properties
from rmq_client.producer import open_producer
from rmq_client.pull_consumer import PullConsumer
from store.decode import CommitLogRecord
from tests.daemon import Daemon
from tests.grpc.official import run_script

TOPIC, TX_TOPIC = "GrpcProduce", "GrpcProduceTx"


def _run_client(endpoint: str, *args: str) -> dict[str, object]:
    return run_script("client_produce.py", endpoint, TOPIC, *(args or (TX_TOPIC,)))


async def _pull_all(port: int, topic: str, wait_for: int) -> list[CommitLogRecord]:
    records: list[CommitLogRecord] = []
    async with open_producer("127.0.0.1", port) as conn:
        consumer = PullConsumer(conn, f"reader_{topic}", "127.0.0.1@reader")
        await consumer.subscribe(topic)
        offsets = dict.fromkeys(range(8), 0)
        with trio.move_on_after(30):
            while len(records) < wait_for:
                for queue_id in offsets:
                    result = await consumer.pull(topic, queue_id, offsets[queue_id])
                    if result.found:
                        records.extend(result.records)
                    offsets[queue_id] = max(offsets[queue_id], result.next_begin_offset)
                await trio.sleep(0.2)
    return records


def test_official_producer_sends_read_back_by_a_4x_consumer(tmp_path: pathlib.Path) -> None:
    daemon = Daemon(
        tmp_path / "store",
        env={
            "RMQ_GRPC_LISTEN": "127.0.0.1:0",
            "RMQ_TRANSACTION_TIME_OUT": "1000",
            "RMQ_TRANSACTION_CHECK_INTERVAL": "1000",
        },
    )
    try:
        grpc_port = int(str(daemon.event("listening")["grpc_port"]))
        result = _run_client(f"127.0.0.1:{grpc_port}")
        for name in ("normal", "fifo0", "fifo1", "fifo2", "delay", "commit", "rollback", "unknown"):
            assert "ok" in result[name], (name, result[name])  # type: ignore[operator]
        assert result["asked"] is True
        unknown_id = result["unknown"]["ok"]  # type: ignore[index]
        assert unknown_id in result["checked"]  # type: ignore[operator]

        records = trio.run(_pull_all, daemon.port, TOPIC, 5)
        by_body = {r.body: r for r in records}
        assert set(by_body) == {b"normal", b"fifo-0", b"fifo-1", b"fifo-2", b"delayed"}
        normal = decode_properties(by_body[b"normal"].properties)
        assert normal["TAGS"] == "TagA"
        assert normal["KEYS"] == "k1"
        assert normal["color"] == "blue"
        assert normal["UNIQ_KEY"] == result["normal"]["ok"]  # type: ignore[index]
        fifo = [by_body[f"fifo-{i}".encode()] for i in range(3)]
        assert len({r.queue_id for r in fifo}) == 1  # one message group, one queue
        assert [r.queue_offset for r in fifo] == sorted(r.queue_offset for r in fifo)
        assert all(decode_properties(r.properties)["__SHARDINGKEY"] == "group-1" for r in fifo)
        delayed = by_body[b"delayed"]
        assert delayed.store_timestamp >= int(str(result["delivery_s"])) * 1000

        tx = trio.run(_pull_all, daemon.port, TX_TOPIC, 2)
        assert sorted(r.body or b"" for r in tx) == [b"commit", b"unknown"]
    finally:
        assert daemon.stop() == 0


ACL = """
accounts:
  - accessKey: grpc-writer
    secretKey: grpc-secret
    defaultTopicPerm: PUB
"""


def test_official_producer_signs_its_calls(tmp_path: pathlib.Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    daemon = Daemon(
        tmp_path / "store",
        env={"RMQ_GRPC_LISTEN": "127.0.0.1:0", "RMQ_ACL_ENABLE": "true", "RMQ_ACL_FILE": str(acl)},
    )
    try:
        endpoint = f"127.0.0.1:{daemon.event('listening')['grpc_port']}"
        good = _run_client(endpoint, "--signed", "grpc-writer", "grpc-secret")
        assert "ok" in good["send"], good  # type: ignore[operator]
        bad = _run_client(endpoint, "--signed", "grpc-writer", "not-the-secret")
        assert "error" in bad["send"], bad  # type: ignore[operator]
        daemon.drain()
        denied = [e for e in daemon.events if e.get("event") == "grpc_acl_denied"]
        assert denied
        assert all(e["reason"] == "bad_signature" for e in denied)
    finally:
        assert daemon.stop() == 0
