"""The official RocketMQ C++ client (PyPI `rocketmq==0.4.4`) produces to a real `rmq-broker serve`.

The client uses the broker itself as its name server. It sends 1,000 messages with tags, keys and
a user property, a batch (the binding's `send_batch`: SEND_MESSAGE with `batch` "1") and a oneway
send; every sync send must come back SEND_OK, and `rmq-broker inspect` must then show every
message as it was sent.

Compression: the Python binding exposes only the compression level; the threshold lives in the C
API (`SetProducerCompressMsgBodyOverHowmuch`, default 4096, bodies of that size or more are
compressed). The test keeps the default and sends bodies at 8 KiB, exactly 4096 and 4095 bytes, so
the stored sysFlag must say compressed exactly for the first two.
"""

from __future__ import annotations

import base64
import json
import pathlib
import subprocess
import time
from typing import Any

from rocketmq.client import Message, Producer, SendStatus

from protocol.compression import decompress_body
from tests.daemon import BROKER, Daemon
from tests.integration.conftest import CLIENT_HOMES
from tests.integration.cpp_producer import shutdown_clear_of_route_refresh

TOPIC = "CppInterop"
COUNT = 1000
BATCH_SIZE = 5
BATCH_FIRST = COUNT
ONEWAY = COUNT + BATCH_SIZE
TOTAL = ONEWAY + 1
COMPRESS_OVER = 4096  # the client's default threshold, inclusive
COMPRESSED_FLAG = 0x1  # sysFlag bit 0


def body_of(index: int) -> bytes:
    """Message `index`'s body: 8 KiB, or exactly at / just under the threshold, or small."""
    if index % 10 == 0:
        size = 8 * 1024
    elif index % 100 == 1:
        size = COMPRESS_OVER
    elif index % 100 == 2:
        size = COMPRESS_OVER - 1
    else:
        return f"body-{index}".encode()
    return (f"payload-{index}-".encode() * size)[:size]


def tags_of(index: int) -> str:
    return f"Tag{index % 3}"


def make_message(index: int, body: bytes) -> Message:
    msg = Message(TOPIC)
    msg.set_tags(tags_of(index))
    msg.set_keys(f"key-{index}")
    msg.set_property("seq", str(index))
    msg.set_body(body)
    return msg


def produce(port: int) -> tuple[list[Any], Any]:
    """The sync sends' results, the batch's result; then one oneway send."""
    producer = Producer("cpp_interop_producer", timeout=5000)
    producer.set_namesrv_addr(f"127.0.0.1:{port}")
    producer.start()
    started = time.monotonic()
    try:
        results = [producer.send_sync(make_message(i, body_of(i))) for i in range(COUNT)]
        indexes = range(BATCH_FIRST, BATCH_FIRST + BATCH_SIZE)
        batch = producer.send_batch([make_message(i, f"batch-{i}".encode()) for i in indexes])
        producer.send_oneway(make_message(ONEWAY, body_of(ONEWAY)))
    finally:
        shutdown_clear_of_route_refresh(producer, started)
    return results, batch


def inspect(store_dir: pathlib.Path) -> list[dict[str, Any]]:
    out = subprocess.run(
        [*BROKER, "inspect", "--store-dir", str(store_dir), "--topic", TOPIC, "--body"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [json.loads(line) for line in out.stdout.splitlines()]


def stored_after_sends(daemon: Daemon) -> list[dict[str, Any]]:
    """The stored records once the oneway send (no answer to wait for) has landed too."""
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        records = inspect(daemon.store_dir)
        if len(records) >= TOTAL:
            break
        time.sleep(0.1)
    return records


def check_stored(stored: dict[str, Any], index: int, body: bytes) -> None:
    assert stored["topic"] == TOPIC
    assert stored["tags"] == tags_of(index)
    assert stored["keys"] == f"key-{index}"
    assert stored["properties"]["seq"] == str(index)
    assert stored["crc_ok"] is True
    raw = base64.b64decode(stored["body"])
    assert bool(stored["sys_flag"] & COMPRESSED_FLAG) == (len(body) >= COMPRESS_OVER)
    assert decompress_body(raw, stored["sys_flag"]) == body


def test_cpp_producer_messages_are_stored_as_sent(
    tmp_path: pathlib.Path, client_home: pathlib.Path
) -> None:
    daemon = Daemon(tmp_path / "store", "--flush-disk-type", "SYNC_FLUSH")
    try:
        results, batch = produce(daemon.port)
        records = stored_after_sends(daemon)
    finally:
        daemon.process.terminate()
        assert daemon.finish() == 0
    # the client took HOME from this process (set by the first test that started it)
    assert (CLIENT_HOMES[0] / "logs").is_dir()

    assert len(results) == COUNT
    assert all(r.status == SendStatus.OK for r in results)
    assert len({r.msg_id for r in results}) == COUNT
    assert batch.status == SendStatus.OK

    assert len(records) == TOTAL  # nothing missing, nothing stored twice
    by_seq = {int(r["properties"]["seq"]): r for r in records}
    assert sorted(by_seq) == list(range(TOTAL))
    for index, result in enumerate(results):
        stored = by_seq[index]
        check_stored(stored, index, body_of(index))
        assert stored["properties"]["UNIQ_KEY"] == result.msg_id
        assert stored["queue_offset"] == result.offset
    assert any(r["sys_flag"] & COMPRESSED_FLAG for r in records)

    batch_stored = [by_seq[i] for i in range(BATCH_FIRST, BATCH_FIRST + BATCH_SIZE)]
    for index, stored in enumerate(batch_stored, start=BATCH_FIRST):
        check_stored(stored, index, f"batch-{index}".encode())
    # One batch, one queue, consecutive queue offsets starting at the one the client was told.
    assert len({s["queue_id"] for s in batch_stored}) == 1
    first = batch.offset
    assert [s["queue_offset"] for s in batch_stored] == list(range(first, first + BATCH_SIZE))
    check_stored(by_seq[ONEWAY], ONEWAY, body_of(ONEWAY))
