"""The RocketMQ 5 Node.js client (`rocketmq-client-nodejs` 1.0.8 from npm, installed by
tests/grpc/install-node-client.sh) against a real broker process's gRPC port, in one node run
(tests/grpc/client_node.js): its Producer's normal sends keep their tag, key and user property,
FIFO sends their message group, a delayed send is not delivered before its time; of its
transactions the committed one is delivered, the rolled back one never, and the one left open
is checked through Telemetry and committed by its TransactionChecker. Its SimpleConsumer
receives every message and acks it (an ack the broker refuses throws in the client and shows in
`errors`); one it leaves unacked comes back with delivery attempt 2 after its invisible
duration. A PushConsumer of a second group gets every message once.

Before the broker served it, this client crashed at its producer's shutdown (grpc-js's GOAWAY
closed the connection under its Telemetry stream), its consumer saw only queue 0, its
PushConsumer discarded every message as corrupt (it writes a CRC32 checksum in decimal, the
broker sent hex) and its checker never ran (the check's message had no digest, which the client
fails to decode)."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess

import pytest

from tests.daemon import Daemon

ROOT = pathlib.Path(__file__).resolve().parents[2]
NODE_MODULES = ROOT / ".node-rmq5" / "node_modules"
CLIENT_SCRIPT = pathlib.Path(__file__).with_name("client_node.js")
COUNT = 6


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
        result = _run_node(endpoint, "node-5x", "NodeTopic", str(COUNT), "20")
        assert result["errors"] == [], result["errors"]
        seen: list[list[object]] = result["seen"]  # type: ignore[assignment]
        by_body = {str(row[0]): row for row in seen}
        expected = {f"n-{i}" for i in range(COUNT)} | {f"fifo-{i}" for i in range(3)}
        expected |= {"delayed", "tx-commit", "tx-unknown"}
        assert set(by_body) == expected  # never tx-rollback
        # each once, but n-0 (left unacked) twice: attempt 1, then 2
        assert sorted(str(row[0]) for row in seen) == sorted([*expected, "n-0"])
        assert [row[7] for row in seen if row[0] == "n-0"] == [1, 2]
        assert all(row[7] == 1 for row in seen if row[0] != "n-0")
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
    finally:
        assert daemon.stop() == 0
    # no connection ended under the client (ordinary ends are logged at debug, not at info)
    closed = [e for e in daemon.events if e.get("event") == "grpc_connection_closed"]
    assert closed == []
    assert not [e for e in daemon.events if e.get("level") in {"error", "critical"}]
