"""A store restarted, cleanly and after SIGKILL, once retention has deleted its first segments:
recovery, the consume queues' minimums, the checkpoint and the consumers' committed offsets
must agree with what the commit log still holds, and the queues must go on where they were."""

from __future__ import annotations

import pathlib

import pytest
import trio

from protocol.codes import ResponseCode
from rmq_client.producer import Message, SendStatus, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from store.checkpoint import StoreCheckpoint
from store.reader import CommitLogReader
from tests.reliability.conftest import SEGMENT_SIZE, Daemon

TOPIC = "Kept"
GROUP = "kept_group"
QUEUES = 3
ALL_HOURS = ";".join(str(hour) for hour in range(24))
#: kept 1.8 s, rounds every 200 ms: the first segments go while the test sends
RETENTION = {
    "RMQ_FILE_RESERVED_TIME": "0.0005",
    "RMQ_DELETE_WHEN": ALL_HOURS,
    "RMQ_CLEAN_RESOURCE_INTERVAL": "200",
    "RMQ_DELETE_PHYSIC_FILES_INTERVAL": "0",
    "RMQ_MAPPED_FILE_SIZE_CONSUME_QUEUE": str(20 * 64),
    # the commits of the first second are on disk before the kill
    "RMQ_FLUSH_CONSUMER_OFFSET_INTERVAL_MS": "100",
}
#: after the restart nothing more expires, so the state can be compared at leisure
KEEP = {**RETENTION, "RMQ_FILE_RESERVED_TIME": "72"}


async def send_until_deleted(port: int, daemon: Daemon) -> dict[int, int]:
    """Send 1 KiB messages over QUEUES queues until two segments were deleted; commit offset 1
    on every queue first (a group that read one message). The next queue offset of each queue."""
    ends = dict.fromkeys(range(QUEUES), 0)
    async with (
        open_producer("127.0.0.1", port, timeout_s=10) as producer,
        open_pull_consumer("127.0.0.1", port, GROUP) as consumer,
    ):
        await consumer.subscribe(TOPIC)
        seq = 0
        with trio.fail_after(60):
            while daemon.count("segment_deleted") < 2:
                queue_id = seq % QUEUES
                body = f"{seq:06d}".encode().ljust(1000, b"-")
                result = await producer.send(Message(TOPIC, body, queue_id=queue_id))
                assert result.status is SendStatus.SEND_OK
                assert result.queue_offset == ends[queue_id]
                ends[queue_id] += 1
                if seq < QUEUES:
                    await consumer.commit(TOPIC, queue_id, 1)
                seq += 1
                if seq % 50 == 0:
                    await trio.sleep(0.05)
    return ends


def log_state(store_dir: pathlib.Path) -> tuple[int, int, dict[int, list[int]]]:
    """The log's first and end offsets and, per queue, the queue offsets it holds."""
    with CommitLogReader(str(store_dir)) as reader:
        first = reader.min_offset
        end = reader.durable_offset()
        held: dict[int, list[int]] = {}
        for record in reader.iter_records(first, include_body=False, verify_crc=True):
            if record.topic == TOPIC:
                held.setdefault(record.queue_id, []).append(record.queue_offset)
    return first, end, held


async def check_agreement(
    port: int, held: dict[int, list[int]], ends: dict[int, int]
) -> dict[int, int]:
    """Bounds, committed offsets and pulls against the log; then one more send per queue.
    The queue offset each of those sends got."""
    got: dict[int, int] = {}
    async with (
        open_pull_consumer("127.0.0.1", port, GROUP) as consumer,
        open_producer("127.0.0.1", port, timeout_s=10) as producer,
    ):
        await consumer.subscribe(TOPIC)
        for queue_id in range(QUEUES):
            offsets = held[queue_id]
            assert offsets == list(range(offsets[0], ends[queue_id]))  # a whole tail
            assert await consumer.min_offset(TOPIC, queue_id) == offsets[0]
            assert await consumer.max_offset(TOPIC, queue_id) == ends[queue_id]
            # committed 1, long deleted: the group goes on from the oldest message kept
            assert await consumer.committed(TOPIC, queue_id) == offsets[0]
            moved = await consumer.pull(TOPIC, queue_id, 1)
            assert moved.code == ResponseCode.PULL_OFFSET_MOVED
            assert moved.next_begin_offset == offsets[0]
            pulled: list[int] = []
            offset = offsets[0]
            while offset < ends[queue_id]:
                result = await consumer.pull(TOPIC, queue_id, offset)
                assert result.found, result.code
                pulled.extend(r.queue_offset for r in result.records)
                offset = result.next_begin_offset
            assert pulled == offsets
            result_send = await producer.send(Message(TOPIC, b"after", queue_id=queue_id))
            got[queue_id] = result_send.queue_offset
    return got


@pytest.mark.parametrize("stop", ["clean", "kill"])
def test_restart_after_deletions_agrees_with_the_log(
    store_dir: pathlib.Path, daemons: list[Daemon], stop: str
) -> None:
    daemon = Daemon(store_dir, "--flush-disk-type", "SYNC_FLUSH", env=RETENTION)
    daemons.append(daemon)
    ends = trio.run(send_until_deleted, daemon.port, daemon)
    assert daemon.count("segment_deleted") >= 2
    if stop == "kill":
        daemon.kill()
    else:
        assert daemon.stop() == 0
    first, end, held = log_state(store_dir)
    assert first >= 2 * SEGMENT_SIZE
    assert sorted(held) == list(range(QUEUES))

    again = Daemon(store_dir, "--flush-disk-type", "SYNC_FLUSH", env=KEEP)
    daemons.append(again)
    recovered = again.event("commit_log_recovered")
    assert recovered["abnormal"] is (stop == "kill")
    assert recovered["offset"] == end
    checkpoint = StoreCheckpoint.load(str(store_dir))
    assert checkpoint is not None and first <= checkpoint.flushed_offset <= end
    sent = trio.run(check_agreement, again.port, held, ends)
    assert sent == ends  # the queues go on where they were: no queue offset twice
    assert again.stop() == 0
    assert log_state(store_dir)[0] == first
