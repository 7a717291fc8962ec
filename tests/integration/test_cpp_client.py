"""The official RocketMQ C++ client (PyPI `rocketmq==0.4.4`) produces to a real `rmq-broker serve`.

The client uses the broker itself as its name server. It sends 1,000 messages with tags, keys and
a user property (every tenth body 8 KiB, which the client compresses), a batch (SEND_MESSAGE with
`batch` "1") and a oneway send; `rmq-broker inspect` must then show every message as it was sent.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Any

from protocol.compression import decompress_body
from tests.broker.test_daemon import BROKER, Daemon
from tests.integration.cpp_producer import BATCH_SIZE, LARGE_BODY_EVERY, body_of

COUNT = 1000
TOPIC = "CppInterop"
SEND_OK = 0
COMPRESSED_FLAG = 0x1


def run_cpp_producer(port: int, home: pathlib.Path) -> list[dict[str, Any]]:
    script = pathlib.Path(__file__).with_name("cpp_producer.py")
    root = pathlib.Path(__file__).resolve().parents[2]
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(root)}  # the client logs under HOME
    done = subprocess.run(
        [sys.executable, str(script), f"127.0.0.1:{port}", TOPIC, str(COUNT)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def inspect(store_dir: pathlib.Path) -> list[dict[str, Any]]:
    out = subprocess.run(
        [*BROKER, "inspect", "--store-dir", str(store_dir), "--topic", TOPIC, "--body"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_cpp_producer_messages_are_stored_as_sent(tmp_path: pathlib.Path) -> None:
    daemon = Daemon(tmp_path / "store", "--flush-disk-type", "SYNC_FLUSH")
    try:
        results = run_cpp_producer(daemon.port, tmp_path)
        # The oneway send has no answer: read until the broker has stored it too.
        records: list[dict[str, Any]] = []
        for _ in range(50):
            records = inspect(daemon.store_dir)
            if len(records) >= COUNT + BATCH_SIZE + 1:
                break
            time.sleep(0.1)
    finally:
        daemon.process.terminate()
        assert daemon.finish() == 0
    syncs = [r for r in results if r["kind"] == "sync"]
    assert len(syncs) == COUNT
    assert all(r["status"] == SEND_OK for r in syncs)
    assert [r["status"] for r in results if r["kind"] == "batch"] == [SEND_OK]

    by_seq = {int(r["properties"]["seq"]): r for r in records}
    assert sorted(by_seq) == list(range(COUNT + BATCH_SIZE + 1))
    assert len(records) == COUNT + BATCH_SIZE + 1  # nothing stored twice
    for sent in syncs:
        index = sent["index"]
        stored = by_seq[index]
        assert stored["tags"] == f"Tag{index % 3}"
        assert stored["keys"] == f"key-{index}"
        assert stored["properties"]["UNIQ_KEY"] == sent["msg_id"]
        assert stored["queue_offset"] == sent["offset"]
        assert stored["crc_ok"] is True
        body = base64.b64decode(stored["body"])
        compressed = bool(stored["sys_flag"] & COMPRESSED_FLAG)
        assert compressed == (index % LARGE_BODY_EVERY == 0)
        assert decompress_body(body, stored["sys_flag"]) == body_of(index)
    for index in range(COUNT, COUNT + BATCH_SIZE):
        stored = by_seq[index]
        assert base64.b64decode(stored["body"]) == f"batch-{index}".encode()
        assert stored["keys"] == f"key-{index}"
    batch_offsets = [by_seq[i]["queue_offset"] for i in range(COUNT, COUNT + BATCH_SIZE)]
    assert batch_offsets == list(range(batch_offsets[0], batch_offsets[0] + BATCH_SIZE))
    assert base64.b64decode(by_seq[COUNT + BATCH_SIZE]["body"]) == body_of(COUNT + BATCH_SIZE)
