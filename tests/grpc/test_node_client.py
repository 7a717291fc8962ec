"""The RocketMQ 5 Node.js client (`rocketmq-client-nodejs` 1.0.8 from npm, installed by
tests/grpc/install-node-client.sh) against a real broker process's gRPC port, in one node run
(tests/grpc/client_node.js): its Producer's normal sends keep their tag, key and user property,
FIFO sends their message group, a delayed send is not delivered before its time; of its
transactions the committed one is delivered, the rolled back one never, and the one left open
is checked through Telemetry and committed by its TransactionChecker. Its SimpleConsumer
receives every message and acks it (an ack or change the broker refuses throws in the client
and shows in `errors`); one it leaves unacked comes back with delivery attempt 2 after its
invisible duration; one whose invisible duration it changes to 4 s comes back no sooner than 4 s
after the change, with attempt 2; one it acks under the receipt handle a change gave never comes
back. A PushConsumer of a second group gets every message once. A message the listeners of two
more PushConsumers fail every time ends in each group's DLQ with its body, tag, keys, user
property and message id: the broker hands it to a group with retryMaxTimes 1 twice (the client
asks for it back at once after each failure), then stores it in the DLQ; a FIFO group's client
forwards it there itself (ForwardMessageToDeadLetterQueue) after one attempt.

Before the broker served it, this client crashed at its producer's shutdown (grpc-js's GOAWAY
closed the connection under its Telemetry stream), its consumer saw only queue 0, its
PushConsumer discarded every message as corrupt (it writes a CRC32 checksum in decimal, the
broker sent hex), its checker never ran (the check's message had no digest, which the client
fails to decode), and a failed message never reached the DLQ: the client changes its invisible
duration to 0 s (it reads no backoff from the customized one the broker tells), which the
broker refused, so the client asked again every second and its shutdown hung."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess

import pytest
import trio

from protocol.admin_group import SubscriptionGroupConfig
from protocol.properties import MessageConst, decode_properties
from rmq_client.admin_groups import update_subscription_group
from rmq_client.producer import open_producer
from rmq_client.pull_consumer import PullConsumer
from store.decode import CommitLogRecord
from tests.daemon import Daemon

ROOT = pathlib.Path(__file__).resolve().parents[2]
NODE_MODULES = ROOT / ".node-rmq5" / "node_modules"
CLIENT_SCRIPT = pathlib.Path(__file__).with_name("client_node.js")
COUNT = 6
GROUP = "node-5x"
DLQ_TOPIC = "NodeDlqTopic"
#: the retry group's retryMaxTimes: the broker hands a failed message out this many times more
RETRIES = 1


def _run_node(*args: str) -> dict[str, object]:
    node = shutil.which("node")
    if node is None or not (NODE_MODULES / "rocketmq-client-nodejs").is_dir():
        pytest.fail("the Node.js client is not installed: bash tests/grpc/install-node-client.sh")
    done = subprocess.run(
        [node, str(CLIENT_SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(NODE_MODULES.parent),
            "NODE_PATH": str(NODE_MODULES),
        },
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(result, dict)
    return result


async def _make_groups(port: int) -> None:
    async with open_producer("127.0.0.1", port) as conn:
        for config in (
            SubscriptionGroupConfig(f"{GROUP}-dlq", retry_max_times=RETRIES),
            SubscriptionGroupConfig(f"{GROUP}-fifo", consume_message_orderly=True),
        ):
            await update_subscription_group(conn, config)


async def _dead_letters(port: int, group: str) -> list[CommitLogRecord]:
    """What the DLQ of `group` holds (waiting up to 10 s for a first message)."""
    async with open_producer("127.0.0.1", port) as conn:
        consumer = PullConsumer(conn, "node-dlq-reader", "127.0.0.1@node-dlq-reader")
        await consumer.subscribe(f"%DLQ%{group}")
        with trio.move_on_after(10):
            while True:
                result = await consumer.pull(f"%DLQ%{group}", 0, 0)
                if result.found:
                    return result.records
                await trio.sleep(0.2)
    return []


def test_node_producer_and_simple_consumer(tmp_path: pathlib.Path) -> None:
    env = {
        "RMQ_GRPC_LISTEN": "127.0.0.1:0",
        # the open transaction is checked 1 s after its send
        "RMQ_TRANSACTION_TIME_OUT": "1000",
        "RMQ_TRANSACTION_CHECK_INTERVAL": "1000",
    }
    daemon = Daemon(tmp_path / "store", env=env)
    try:
        endpoint = f"127.0.0.1:{daemon.event('listening')['grpc_port']}"
        trio.run(_make_groups, daemon.port)
        attempts = str(RETRIES + 1)
        result = _run_node(endpoint, GROUP, "NodeTopic", str(COUNT), "20", DLQ_TOPIC, attempts)
        assert result["errors"] == [], result["errors"]
        seen: list[list[object]] = result["seen"]  # type: ignore[assignment]
        by_body = {str(row[0]): row for row in seen}
        expected = {f"n-{i}" for i in range(COUNT)} | {f"fifo-{i}" for i in range(3)}
        expected |= {"delayed", "slow-0", "slow-1", "tx-commit", "tx-unknown"}
        assert set(by_body) == expected  # never tx-rollback
        # each once, but n-0 (left unacked) and slow-0 (hidden 4 s, unacked) twice: attempt 1,
        # then 2; slow-1, acked under the handle its change gave, never again
        twice = ["n-0", "slow-0"]
        assert sorted(str(row[0]) for row in seen) == sorted([*expected, *twice])
        for body in twice:
            assert [row[7] for row in seen if row[0] == body] == [1, 2]
        assert all(row[7] == 1 for row in seen if row[0] not in twice)
        # slow-0 came back no sooner than 4 s after the change (not when its first 2 s ran out;
        # 50 ms of slack for clocks read in whole milliseconds)
        changed: dict[str, int] = result["changed"]  # type: ignore[assignment]
        back = [int(str(row[6])) for row in seen if row[0] == "slow-0"][1]
        assert back >= changed["slow-0"] + 4000 - 50
        for i in range(COUNT):
            _body, tag, keys, seq, _id, group, _at, _attempt = by_body[f"n-{i}"]
            assert (tag, keys, seq, group) == (f"Tag{i % 3}", [f"key-{i}"], str(i), None)
        assert [by_body[f"fifo-{i}"][5] for i in range(3)] == ["group-1"] * 3
        sent: list[str] = result["sent"]  # type: ignore[assignment]
        fifo: list[str] = result["fifo"]  # type: ignore[assignment]
        assert len(set(sent)) == COUNT
        assert [by_body[f"n-{i}"][4] for i in range(COUNT)] == sent
        assert [by_body[f"fifo-{i}"][4] for i in range(3)] == fifo
        delayed = by_body["delayed"]
        assert delayed[4] == result["delayed"]
        # sent 2 s ahead; received immediately would be ~2000 ms early (1 s of slack for a
        # delivery time kept in whole seconds)
        assert int(str(delayed[6])) >= int(str(result["deliverAt"])) - 1000
        tx: dict[str, str] = result["tx"]  # type: ignore[assignment]
        assert by_body["tx-commit"][4] == tx["commit"]
        assert by_body["tx-unknown"][4] == tx["unknown"]
        assert tx["unknown"] in result["checked"]  # type: ignore[operator]
        assert tx["commit"] not in result["checked"]  # type: ignore[operator]
        # the PushConsumer: every message once (the "wake" it may get at its shutdown aside)
        pushed: list[list[object]] = result["pushed"]  # type: ignore[assignment]
        bodies = [str(row[0]) for row in pushed if row[0] != "wake"]
        assert sorted(bodies) == sorted(expected)
        assert all(row[2] == 1 for row in pushed)
        _check_dead_letters(result, daemon.port)
    finally:
        assert daemon.stop() == 0
    # no connection ended under the client (ordinary ends are logged at debug, not at info)
    closed = [e for e in daemon.events if e.get("event") == "grpc_connection_closed"]
    assert closed == []
    assert not [e for e in daemon.events if e.get("level") in {"error", "critical"}]


def _check_dead_letters(result: dict[str, object], port: int) -> None:
    """The message both failing PushConsumers were given: the broker handed it to group
    node-5x-dlq RETRIES times more (each failure changes its invisible duration; the client
    reads no backoff from the customized one the broker tells, so it asks for 0 s), then stored
    it in that group's DLQ; the FIFO group's client forwarded it to its DLQ itself after its
    one attempt (without a backoff policy it allows one). Each DLQ copy keeps the body, tag,
    keys, user property and message id."""
    failed: list[list[object]] = result["failed"]  # type: ignore[assignment]
    doomed = str(result["doomed"])
    rows = [row for row in failed if row[1] != "wake"]
    assert {(row[1], row[2]) for row in rows} == {("doomed", doomed)}
    assert [row[3] for row in rows if row[0] == "dlq"] == list(range(1, RETRIES + 2))
    assert [row[3] for row in rows if row[0] == "fifo"] == [1]
    for suffix in ("dlq", "fifo"):
        # (the FIFO group's client fails and forwards the "wake" too, at its shutdown)
        records = trio.run(_dead_letters, port, f"{GROUP}-{suffix}")
        records = [r for r in records if r.body != b"wake"]
        assert [r.body for r in records] == [b"doomed"], suffix
        props = decode_properties(records[0].properties)
        assert props["origin"] == "node"
        assert props[MessageConst.TAGS] == "TagD"
        assert props[MessageConst.KEYS] == "key-d"
        assert props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] == doomed
