"""`rmq-broker query`: by key and by offset message id, against a running broker and against its
store directory once it stopped, printed as `inspect` prints records; exit codes."""

from __future__ import annotations

import base64
import json
import pathlib

import trio

from rmq_client.producer import Message, open_producer
from tests.broker.test_query import INDEX_ENV, settled
from tests.daemon import Daemon, run_cli


def lines(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines()]


async def test_query_by_key_and_by_id_on_a_broker_and_in_its_store(
    tmp_path: pathlib.Path,
) -> None:
    store = tmp_path / "store"
    daemon = Daemon(store, env=INDEX_ENV)
    try:
        async with open_producer("127.0.0.1", daemon.port) as conn:
            sent = [
                await conn.send(Message("CliQ", b"body-%d" % n, keys=["cli-key", f"k{n}"]))
                for n in range(5)
            ]
            await conn.send(Message("CliQ", b"other", keys="unrelated"))
            await conn.send(Message("Elsewhere", b"elsewhere", keys="cli-key"))
            await settled(conn, "CliQ", "cli-key", 5)
        addr = f"127.0.0.1:{daemon.port}"
        by_key = await trio.to_thread.run_sync(
            run_cli, "query", "--addr", addr, "--key", "cli-key", "--topic", "CliQ"
        )
        assert by_key.returncode == 0, by_key.stderr
        found = lines(by_key.stdout)
        assert [line["keys"] for line in found] == [f"cli-key k{n}" for n in range(5)]
        assert all(line["topic"] == "CliQ" for line in found)
        assert "5 records" in by_key.stderr
        by_id = await trio.to_thread.run_sync(
            run_cli, "query", "--addr", addr, "--msg-id", sent[3].offset_msg_id, "--body"
        )
        assert by_id.returncode == 0, by_id.stderr
        [one] = lines(by_id.stdout)
        assert base64.b64decode(str(one["body"])) == b"body-3"
        missing = await trio.to_thread.run_sync(
            run_cli, "query", "--addr", addr, "--key", "nothing", "--topic", "CliQ"
        )
        assert missing.returncode == 1 and missing.stdout == ""
    finally:
        daemon.stop()
    # the stopped broker's store directory answers the same
    by_key = run_cli("query", "--store-dir", str(store), "--key", "k2", "--topic", "CliQ")
    assert by_key.returncode == 0, by_key.stderr
    assert [line["keys"] for line in lines(by_key.stdout)] == ["cli-key k2"]
    newest = run_cli(
        "query", "--store-dir", str(store), "--key", "cli-key", "--topic", "CliQ", "--max-num", "2"
    )
    assert [line["keys"] for line in lines(newest.stdout)] == ["cli-key k3", "cli-key k4"]
    unique = run_cli("query", "--store-dir", str(store), "--key", sent[1].msg_id, "--topic", "CliQ")
    assert [line["keys"] for line in lines(unique.stdout)] == ["cli-key k1"]
    by_id = run_cli("query", "--store-dir", str(store), "--msg-id", sent[4].offset_msg_id)
    assert by_id.returncode == 0, by_id.stderr
    assert [line["keys"] for line in lines(by_id.stdout)] == ["cli-key k4"]
    shifted = sent[4].offset_msg_id[:-2] + f"{int(sent[4].offset_msg_id[-2:], 16) + 1:02X}"
    assert run_cli("query", "--store-dir", str(store), "--msg-id", shifted).returncode == 1


def test_usage_errors_and_an_unreachable_broker(tmp_path: pathlib.Path) -> None:
    both = run_cli("query", "--addr", "127.0.0.1:1", "--key", "k", "--msg-id", "00")
    assert both.returncode == 2 and "either --key" in both.stderr
    no_topic = run_cli("query", "--addr", "127.0.0.1:1", "--key", "k")
    assert no_topic.returncode == 2 and "--topic" in no_topic.stderr
    bad_id = run_cli("query", "--addr", "127.0.0.1:1", "--msg-id", "XYZ")
    assert bad_id.returncode == 2 and "--msg-id" in bad_id.stderr
    not_a_store = run_cli("query", "--store-dir", str(tmp_path), "--key", "k", "--topic", "T")
    assert not_a_store.returncode == 1 and "not a store" in not_a_store.stderr
    unreachable = run_cli(
        "query", "--addr", "127.0.0.1:1", "--key", "k", "--topic", "T", "--timeout", "2"
    )
    assert unreachable.returncode == 1 and "unreachable" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr
