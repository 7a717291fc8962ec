"""Torn tails under the real daemon: damage the last record at many byte positions, restart, and
the broker cuts exactly that record (keeping the cut bytes beside the segment), keeps every record
before it, and appends the next message where the cut record began."""

from __future__ import annotations

import pathlib
import random

import pytest
import trio

from protocol.msgid import decode_offset_msg_id
from rmq_client.producer import Message, SendStatus, open_producer
from store.decode import CommitLogRecord
from store.reader import CommitLogReader
from tests.daemon import Daemon

DAMAGE_CASES = 12


async def send_messages(port: int, count: int, tag: str) -> list[int]:
    offsets = []
    async with open_producer("127.0.0.1", port) as client:
        for seq in range(count):
            result = await client.send(Message("Torn", f"{tag}-{seq}".encode() * 8, tags=tag))
            assert result.status is SendStatus.SEND_OK
            offsets.append(decode_offset_msg_id(result.offset_msg_id)[2])
    return offsets


def read_all(store_dir: pathlib.Path) -> list[CommitLogRecord]:
    with CommitLogReader(str(store_dir)) as reader:
        return list(reader.iter_records(reader.min_offset))


def damage(segment: pathlib.Path, record: CommitLogRecord, base: int, rng: random.Random) -> str:
    """Corrupt `record` in place where the format can tell (sizes, magic, CRC-covered bytes)."""
    start = record.physical_offset - base
    body_at = start + 88  # IPv4 hosts: the fixed header ends with the body length at 84
    topic_len_at = body_at + len(record.body or b"")
    props_len_at = topic_len_at + 1 + len(record.topic.encode())
    regions = {
        "total_size": (start, start + 4),
        "magic": (start + 4, start + 8),
        "body_crc": (start + 8, start + 12),
        "physical_offset": (start + 28, start + 36),
        "body": (body_at, topic_len_at),
        "topic_length": (topic_len_at, topic_len_at + 1),
        "properties_length": (props_len_at, props_len_at + 2),
    }
    name = rng.choice(sorted(regions))
    low, high = regions[name]
    position = rng.randrange(low, high)
    with segment.open("r+b") as file:
        if rng.random() < 0.5:
            file.seek(position)
            flipped = file.read(1)[0] ^ 1 << rng.randrange(8)  # one flipped bit
            file.seek(position)
            file.write(bytes([flipped]))
            how = "flip"
        else:
            file.seek(position)  # zeroed from there to the record's end
            file.write(bytes(start + record.total_size - position))
            how = "zero"
    return f"{name}/{how}@{position - start}"


def test_damaged_last_record_is_cut_and_the_broker_serves_on(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RMQ_MAPPED_FILE_SIZE_COMMIT_LOG", str(1 << 20))
    store_dir = tmp_path / "store"
    rng = random.Random(11)
    daemon = Daemon(store_dir, "--flush-disk-type", "SYNC_FLUSH")
    trio.run(send_messages, daemon.port, 20, "first")
    daemon.process.terminate()
    assert daemon.finish() == 0
    for case in range(DAMAGE_CASES):
        before = read_all(store_dir)
        last = before[-1]
        segments = sorted((store_dir / "commitlog").glob("[0-9]" * 20))
        base = max(int(s.name) for s in segments if int(s.name) <= last.physical_offset)
        segment = store_dir / "commitlog" / f"{base:020d}"
        what = damage(segment, last, base, rng)
        daemon = Daemon(store_dir, "--flush-disk-type", "SYNC_FLUSH")
        try:
            after = read_all(store_dir)
            assert [r.physical_offset for r in after] == [r.physical_offset for r in before[:-1]], (
                what
            )
            assert [r.body for r in after] == [r.body for r in before[:-1]], what
            assert list((store_dir / "commitlog").glob(f"{base:020d}.truncated-*")), what
            (appended,) = trio.run(send_messages, daemon.port, 1, f"case{case}")
            assert appended == last.physical_offset, what
        finally:
            daemon.process.terminate()
            assert daemon.finish() == 0, what


def test_mid_log_corruption_is_reported_and_cut_when_the_operator_says_so(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RMQ_MAPPED_FILE_SIZE_COMMIT_LOG", str(1 << 20))
    store_dir = tmp_path / "store"
    daemon = Daemon(store_dir, "--flush-disk-type", "SYNC_FLUSH")
    trio.run(send_messages, daemon.port, 10, "mid")
    daemon.process.terminate()
    assert daemon.finish() == 0
    records = read_all(store_dir)
    victim = records[4]
    segment = store_dir / "commitlog" / f"{0:020d}"
    with segment.open("r+b") as file:
        file.seek(victim.physical_offset + 88)  # a body byte: the CRC no longer matches
        file.write(b"\xff")
    # After a clean stop the broker starts at once and its background check names the damage.
    daemon = Daemon(store_dir, "--flush-disk-type", "SYNC_FLUSH")
    corrupt = daemon.event("commit_log_corrupt")
    assert (corrupt["file"], corrupt["offset"]) == (str(segment), victim.physical_offset)
    assert daemon.stop() == 0
    monkeypatch.setenv("RMQ_RECOVER_TRUNCATE_CORRUPT", "true")
    daemon = Daemon(store_dir, "--flush-disk-type", "SYNC_FLUSH")
    daemon.process.terminate()
    assert daemon.finish() == 0
    assert [r.physical_offset for r in read_all(store_dir)] == [
        r.physical_offset for r in records[:4]
    ]
