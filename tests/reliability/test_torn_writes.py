"""Torn writes and corruption under the real daemon.

A torn append (the first bytes of a record that never became durable, cut anywhere: inside the
length, the header, the body, the properties; or random garbage) sits after the last record;
restarting truncates to the last valid record, keeps the cut bytes beside the segment and serves,
and the next message takes the offset where the torn bytes began. A damaged record or BLANK with
valid records after it, below the durable offset, is corruption: startup stops naming file and
offset, unless the operator sets `recover_truncate_corrupt`.
"""

from __future__ import annotations

import pathlib
import random
import struct

import pytest
import trio

from protocol.msgid import decode_offset_msg_id
from rmq_client.producer import Message, SendStatus, open_producer
from store.decode import CommitLogRecord
from store.layout import BLANK_MAGIC_CODE, PHYSICALOFFSET_POS
from tests.reliability.conftest import (
    SEGMENT_SIZE,
    SOAK,
    Daemon,
    read_records,
    segment_paths,
)

TORN_CASES = 12 if SOAK else 3
WHERE = ("length", "header", "body", "properties", "garbage")
HEADER_SIZE = 88  # IPv4 hosts: the fixed part of a record, up to and including the body length


async def send(port: int, count: int, tag: str) -> list[int]:
    offsets = []
    async with open_producer("127.0.0.1", port) as client:
        for seq in range(count):
            body = f"{tag}-{seq:05d}".encode() * 20
            result = await client.send(Message("Torn", body, tags=tag, keys=f"k{seq}"))
            assert result.status is SendStatus.SEND_OK
            offsets.append(decode_offset_msg_id(result.offset_msg_id)[2])
    return offsets


def populate(store_dir: pathlib.Path, count: int) -> list[CommitLogRecord]:
    daemon = Daemon(store_dir, "--flush-disk-type", "SYNC_FLUSH")
    try:
        trio.run(send, daemon.port, count, "base")
    finally:
        assert daemon.stop() == 0
    return read_records(store_dir)


def segment_of(store_dir: pathlib.Path, offset: int) -> pathlib.Path:
    return store_dir / "commitlog" / f"{offset - offset % SEGMENT_SIZE:020d}"


def torn_bytes(
    last: CommitLogRecord, segment: pathlib.Path, end: int, where: str, rng: random.Random
) -> bytes:
    """What a crash mid-append leaves after offset `end`: a record prefix cut `where`, or random
    garbage. A power loss tears at page boundaries, so any cut point can reach the disk."""
    data = segment.read_bytes()
    start = last.physical_offset % SEGMENT_SIZE
    record = bytearray(data[start : start + last.total_size])
    struct.pack_into(">q", record, PHYSICALOFFSET_POS, end)  # the writer patched it first
    body_end = HEADER_SIZE + len(last.body or b"")
    props_at = body_end + 1 + len(last.topic) + 2
    if where == "length":
        cut = rng.randint(1, 3)
    elif where == "header":
        cut = rng.randint(4, HEADER_SIZE)
    elif where == "body":
        cut = rng.randint(HEADER_SIZE + 1, body_end)
    else:
        cut = rng.randint(props_at + 1, last.total_size - 1)
    if where == "garbage":
        return b"\xff" + rng.randbytes(rng.randint(0, 300))
    return bytes(record[:cut])


@pytest.mark.parametrize("where", WHERE)
def test_torn_append_is_truncated_kept_aside_and_overwritten(
    store_dir: pathlib.Path, daemons: list[Daemon], where: str
) -> None:
    rng = random.Random(f"torn-{where}")
    before = populate(store_dir, 200)
    assert len(segment_paths(store_dir)) >= 2, "the log should span several segments"
    for case in range(TORN_CASES):
        last = before[-1]
        end = last.physical_offset + last.total_size
        segment = segment_of(store_dir, last.physical_offset)
        room = SEGMENT_SIZE - end % SEGMENT_SIZE
        torn = torn_bytes(last, segment, end, where, rng)[: room - 1]
        if not torn.rstrip(b"\0"):
            torn = b"\x01"
        with open(segment, "r+b") as handle:
            handle.seek(end % SEGMENT_SIZE)
            handle.write(torn)
        daemon = Daemon(store_dir, "--flush-disk-type", "SYNC_FLUSH")
        daemons.append(daemon)
        after = read_records(store_dir)
        assert [(r.physical_offset, r.body) for r in after] == [
            (r.physical_offset, r.body) for r in before
        ], f"{where} case {case}: a torn record became visible"
        side = pathlib.Path(f"{segment}.truncated-{end}")
        assert side.read_bytes() == torn.rstrip(b"\0"), f"case {case}: cut bytes not kept"
        side.unlink()
        (offset,) = trio.run(send, daemon.port, 1, f"case{case}")
        assert offset == end, f"case {case}: next message at {offset}, torn bytes began at {end}"
        # Alternate a crash and a clean stop, so both normal and abnormal recovery are exercised.
        if case % 2:
            daemon.kill()
        else:
            assert daemon.stop() == 0
        before = read_records(store_dir)
        assert before[-1].physical_offset == end


def corrupt_middle(store_dir: pathlib.Path, records: list[CommitLogRecord], blank: bool) -> int:
    """Damage a record (or the BLANK ending the first segment) with valid records after it."""
    first_segment_end = [r for r in records if r.physical_offset < SEGMENT_SIZE][-1]
    if blank:
        offset = first_segment_end.physical_offset + first_segment_end.total_size
        segment = segment_of(store_dir, offset)
        with open(segment, "r+b") as handle:
            handle.seek(offset)
            size, magic = struct.unpack(">ii", handle.read(8))
            assert magic == BLANK_MAGIC_CODE
            handle.seek(offset)
            handle.write(struct.pack(">i", size - 16))
        return offset
    victim = records[len(records) // 5]
    assert victim.physical_offset < first_segment_end.physical_offset
    segment = segment_of(store_dir, victim.physical_offset)
    with open(segment, "r+b") as handle:
        handle.seek(victim.physical_offset % SEGMENT_SIZE + HEADER_SIZE + 3)
        handle.write(b"\x00\xff\x00")  # inside the body: the CRC no longer matches
    return victim.physical_offset


@pytest.mark.parametrize("blank", [False, True], ids=["record", "blank"])
def test_corruption_in_the_middle_is_reported_and_cut_when_told_to(
    store_dir: pathlib.Path, daemons: list[Daemon], blank: bool
) -> None:
    records = populate(store_dir, 300)
    bad = corrupt_middle(store_dir, records, blank)
    damaged = {path.name: path.read_bytes() for path in segment_paths(store_dir)}
    # After a clean stop the broker starts without a scan; its background check names the
    # damage, and nothing is changed.
    serving = Daemon(store_dir, "--flush-disk-type", "SYNC_FLUSH")
    daemons.append(serving)
    corrupt = serving.event("commit_log_corrupt")
    assert (corrupt["file"], corrupt["offset"]) == (str(segment_of(store_dir, bad)), bad)
    serving.kill()
    assert {path.name: path.read_bytes() for path in segment_paths(store_dir)} == damaged
    (store_dir / "abort").unlink()  # as if stopped cleanly again: the operator now asks for a cut

    daemon = Daemon(
        store_dir, "--flush-disk-type", "SYNC_FLUSH", env={"RMQ_RECOVER_TRUNCATE_CORRUPT": "true"}
    )
    daemons.append(daemon)
    assert daemon.count("commit_log_corrupt_truncated") == 1, daemon.text()
    kept = read_records(store_dir)
    assert [r.physical_offset for r in kept] == [
        r.physical_offset for r in records if r.physical_offset < bad
    ]
    assert list((store_dir / "commitlog").glob("*.truncated-*")), "cut bytes must be kept"
    (offset,) = trio.run(send, daemon.port, 1, "after")
    room = SEGMENT_SIZE - bad % SEGMENT_SIZE
    # Where the cut record began, or the next segment when it no longer fits behind a BLANK.
    assert offset == bad or (blank and offset == bad + room), (offset, bad)
    assert daemon.stop() == 0
