"""The official C++ client (`rocketmq==0.4.4`) against a broker whose retention deleted what a
consumer group had not read yet: a push consumer that committed offsets, stopped, and comes back
after its messages expired goes on from the oldest message kept, receiving each one after it
exactly once; a new group's pull consumer reads what is kept."""

from __future__ import annotations

import os
import pathlib
import threading
import time
from collections.abc import Iterable

import trio
from rocketmq.client import PushConsumer, RecvMessage

from rmq_client.pull_consumer import open_pull_consumer
from tests.daemon import Daemon, run_cli
from tests.integration import cpp_producer

TOPIC = "CppRetention"
GROUP = "cpp_retention_group"
QUEUES = 4
#: segments are deleted only when the test ages them and asks, as an operator would
RETENTION = {
    "RMQ_MAPPED_FILE_SIZE_COMMIT_LOG": str(64 * 1024),
    "RMQ_FILE_RESERVED_TIME": "1",
    "RMQ_DELETE_WHEN": str((time.localtime().tm_hour + 12) % 24),
    "RMQ_CLEAN_RESOURCE_INTERVAL": "200",
    "RMQ_DELETE_PHYSIC_FILES_INTERVAL": "0",
    "RMQ_FLUSH_CONSUMER_OFFSET_INTERVAL_MS": "200",
}


def age_oldest(store: pathlib.Path, count: int) -> None:
    """Make the `count` oldest segments look two hours old."""
    segments = sorted((store / "commitlog").glob("[0-9]" * 20))[:count]
    past = time.time() - 2 * 3600
    for segment in segments:
        os.utime(segment, (past, past))


def produce(port: int, indexes: Iterable[int]) -> None:
    cpp_producer.produce(
        port,
        TOPIC,
        "cpp_retention_producer",
        indexes,
        lambda index: f"{index:06d}".encode().ljust(1000, b"."),
    )


class Received:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seqs: list[int] = []

    def __call__(self, msg: RecvMessage) -> None:
        with self.lock:
            self.seqs.append(int(msg.get_property("seq")))

    def wait_for(self, wanted: set[int], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if wanted <= set(self.seqs):
                    return
            time.sleep(0.1)
        with self.lock:
            missing = sorted(wanted - set(self.seqs))
        raise AssertionError(f"never delivered: {missing[:20]} ({len(missing)} in all)")


def push_consume(port: int, received: Received, wanted: set[int], settle_s: float) -> None:
    consumer = PushConsumer(GROUP)
    consumer.set_namesrv_addr(f"127.0.0.1:{port}")
    consumer.set_thread_count(1)
    consumer.subscribe(TOPIC, received)
    consumer.start()
    try:
        received.wait_for(wanted, 40)
        time.sleep(settle_s)  # the client persists its offsets every 5 s, and at shutdown
    finally:
        consumer.shutdown()


async def queue_bounds(port: int) -> dict[int, tuple[int, int]]:
    async with open_pull_consumer("127.0.0.1", port, "bounds_reader") as reader:
        return {
            q: (await reader.min_offset(TOPIC, q), await reader.max_offset(TOPIC, q))
            for q in range(QUEUES)
        }


async def kept_seqs(port: int, bounds: dict[int, tuple[int, int]]) -> set[int]:
    """The seq of every message still stored, read with the project's pull client."""
    kept: set[int] = set()
    async with open_pull_consumer("127.0.0.1", port, "kept_reader") as reader:
        await reader.subscribe(TOPIC)
        for queue_id, (low, high) in bounds.items():
            offset = low
            while offset < high:
                result = await reader.pull(TOPIC, queue_id, offset)
                assert result.found, result.code
                kept.update(
                    int(r.properties.split("seq\x01")[1].split("\x02")[0]) for r in result.records
                )
                offset = result.next_begin_offset
    return kept


def test_a_group_back_after_its_messages_expired_goes_on_from_the_oldest_kept(
    tmp_path: pathlib.Path, client_home: pathlib.Path
) -> None:
    daemon = Daemon(tmp_path / "store", "--flush-disk-type", "SYNC_FLUSH", env=RETENTION)
    try:
        produce(daemon.port, range(40))
        first = Received()
        push_consume(daemon.port, first, set(range(40)), settle_s=6)
        # The group is away; 600 KiB more arrive, the oldest six segments expire and go.
        produce(daemon.port, range(40, 640))
        age_oldest(tmp_path / "store", 6)
        asked = run_cli("admin", "deleteExpiredCommitLog", "-b", f"127.0.0.1:{daemon.port}")
        assert asked.returncode == 0, asked.stderr
        deadline = time.monotonic() + 30
        while daemon.count("consume_queue_min_offset_corrected") < QUEUES:
            assert time.monotonic() < deadline, "retention never caught up"
            time.sleep(0.2)
        assert daemon.count("segment_deleted") == 6
        bounds = trio.run(queue_bounds, daemon.port)
        assert all(low > 10 for low, _ in bounds.values()), bounds  # its commits were below
        kept = trio.run(kept_seqs, daemon.port, bounds)
        assert kept and min(kept) > 40
        second = Received()
        push_consume(daemon.port, second, kept, settle_s=1)
    finally:
        assert daemon.stop() == 0
    assert sorted(first.seqs) == list(range(40))
    # From the oldest kept message on, each exactly once: no stall at the deleted offsets, and
    # nothing that retention removed comes back.
    assert sorted(second.seqs) == sorted(kept), (len(second.seqs), len(kept))
