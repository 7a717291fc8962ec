"""Directory entries across power cuts: a file is durable only once the directory that names
it is fsynced. A cut right after the log rolls into a new segment, after consume-queue files are
created, and after the config files (topics, consumer offsets) are replaced: nothing
acknowledged or committed is lost, and the consume queues still match the log."""

from __future__ import annotations

import json
import pathlib
import time

import pytest
import trio

from protocol.msgid import decode_offset_msg_id
from rmq_client.producer import Message, SendStatus, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from tests.powercut.checks import check_consume_queues, check_on_disk_after_cut
from tests.powercut.mount import PowerCutFS
from tests.reliability.acks import Ack, check_acknowledged
from tests.reliability.conftest import SEGMENT_SIZE, Daemon, read_records

SYNC = ("--flush-disk-type", "SYNC_FLUSH")
#: consume-queue files of 8 units, so a few sends create new ones
CQ_UNITS = 8
CQ_ENV = {"RMQ_MAPPED_FILE_SIZE_CONSUME_QUEUE": str(CQ_UNITS * 20)}


async def send_until(port: int, topic: str, acks: dict[int, Ack], offset_at_least: int) -> None:
    """Send 1 KiB messages (one at least) until one is acknowledged at `offset_at_least` or
    beyond."""
    async with open_producer("127.0.0.1", port) as client:
        first = seq = len(acks)  # bodies stay unique across calls
        while seq == first or max(acks) < offset_at_least:
            body = f"{topic}-{seq:06d}-".encode().ljust(1024, b".")
            sent = await client.send(Message(topic, body))
            assert sent.status is SendStatus.SEND_OK
            offset = decode_offset_msg_id(sent.offset_msg_id)[2]
            acks[offset] = Ack(offset, topic, sent.queue_id, sent.queue_offset, body)
            seq += 1


def power_cycle(powercut: PowerCutFS, daemon: Daemon, store_dir: pathlib.Path) -> Daemon:
    """SIGKILL, cut, power back on, restart."""
    daemon.kill()
    powercut.cut()
    powercut.mount()
    return Daemon(store_dir, *SYNC, env=CQ_ENV)


def wait_until(what: str, ready: object, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready() if callable(ready) else False:
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_cut_right_after_segment_rolls_loses_nothing(
    powercut: PowerCutFS, brokers: list[Daemon]
) -> None:
    store_dir = powercut.mountpoint / "store"
    acks: dict[int, Ack] = {}
    for segment in (1, 2, 3):
        daemon = Daemon(store_dir, *SYNC, env=CQ_ENV)
        brokers.append(daemon)
        # the first acknowledgement in the new segment, then the cut at once
        trio.run(send_until, daemon.port, "Roll", acks, segment * SEGMENT_SIZE)
        daemon.kill()
        powercut.cut()
        powercut.mount()
        names = sorted(p.name for p in (store_dir / "commitlog").iterdir())
        assert f"{segment * SEGMENT_SIZE:020d}" in names, names
        check_on_disk_after_cut(store_dir, acks)
    daemon = Daemon(store_dir, *SYNC, env=CQ_ENV)
    brokers.append(daemon)
    records = read_records(store_dir)
    check_acknowledged(records, acks)
    assert daemon.stop() == 0
    check_consume_queues(store_dir, records, CQ_UNITS)


def dispatched_offset(store_dir: pathlib.Path) -> int:
    try:
        return int((store_dir / "consumequeue" / "dispatched.offset").read_text() or 0)
    except (FileNotFoundError, ValueError):
        return -1


@pytest.mark.parametrize("when", ["at_once", "after_queue_flush"])
def test_cut_after_consume_queue_files_are_created_keeps_queues_whole(
    powercut: PowerCutFS, brokers: list[Daemon], when: str
) -> None:
    store_dir = powercut.mountpoint / "store"
    daemon = Daemon(store_dir, *SYNC, env=CQ_ENV)
    brokers.append(daemon)
    acks: dict[int, Ack] = {}
    trio.run(send_until, daemon.port, "Queues", acks, 40 * 1024)
    queue_files = list((store_dir / "consumequeue" / "Queues").glob("*/*"))
    assert len(queue_files) > len(list((store_dir / "consumequeue" / "Queues").iterdir()))
    if when == "after_queue_flush":
        end = max(acks) + 1024
        wait_until("the dispatched offset", lambda: dispatched_offset(store_dir) >= end)
    daemon = power_cycle(powercut, daemon, store_dir)
    brokers.append(daemon)
    records = read_records(store_dir)
    check_acknowledged(records, acks)
    assert daemon.stop() == 0
    check_consume_queues(store_dir, records, CQ_UNITS)


def config_has(path: pathlib.Path, text: str) -> bool:
    try:
        return text in path.read_text()
    except FileNotFoundError:
        return False


async def commit_offset(port: int, group: str, topic: str, offset: int) -> None:
    async with open_pull_consumer("127.0.0.1", port, group) as consumer:
        await consumer.commit(topic, 0, offset)


async def committed_offset(port: int, group: str, topic: str) -> int | None:
    async with open_pull_consumer("127.0.0.1", port, group) as consumer:
        return await consumer.committed(topic, 0)


def test_cut_after_config_files_are_replaced_keeps_them(
    powercut: PowerCutFS, brokers: list[Daemon]
) -> None:
    store_dir = powercut.mountpoint / "store"
    config = store_dir / "config"
    env = {**CQ_ENV, "RMQ_FLUSH_CONSUMER_OFFSET_INTERVAL_MS": "100"}
    daemon = Daemon(store_dir, *SYNC, env=env)
    brokers.append(daemon)
    acks: dict[int, Ack] = {}
    for topic in ("ConfigA", "ConfigB"):
        trio.run(send_until, daemon.port, topic, acks, 0)
        wait_until(f"{topic} in topics.json", lambda t=topic: config_has(config / "topics.json", t))
    for offset in (3, 7):
        trio.run(commit_offset, daemon.port, "CutGroup", "ConfigA", offset)
        wait_until(
            f"offset {offset} persisted",
            lambda o=offset: _persisted_offset(config / "consumerOffset.json") == o,
        )
    daemon = power_cycle(powercut, daemon, store_dir)
    brokers.append(daemon)
    topics = json.loads((config / "topics.json").read_text())
    assert {"ConfigA", "ConfigB"} <= set(topics["topicConfigTable"])
    assert trio.run(committed_offset, daemon.port, "CutGroup", "ConfigA") == 7
    check_acknowledged(read_records(store_dir), acks)
    assert daemon.stop() == 0


def _persisted_offset(path: pathlib.Path) -> int | None:
    try:
        table = json.loads(path.read_text())["offsetTable"]
    except (FileNotFoundError, ValueError, KeyError):
        return None
    queues = table.get("ConfigA@CutGroup", {})
    return int(queues["0"]) if "0" in queues else None
