"""CommitLogReader: the durable bound, resync at any byte, stores without flushoffset, and a
reader in another process while the store writes."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from store.config import FlushDiskType, MessageStoreConfig
from store.decode import RecordFormatError
from store.flush import thread_flusher
from store.mapped_file import MappedFile
from store.message_store import DefaultMessageStore
from store.reader import CommitLogReader
from tests.store.conftest import SEGMENT, make_msg, patch_file, read_file, wait_until

ROOT = Path(__file__).resolve().parents[2]


async def _fill(config: MessageStoreConfig, count: int) -> list[int]:
    offsets = []
    async with DefaultMessageStore.open(config) as store:
        for i in range(count):
            result = await store.put_message(make_msg(b"body-%d" % i + b"-" * (i * 7 % 300)))
            assert result.append_result is not None
            offsets.append(result.append_result.wrote_offset)
    return offsets


async def test_reader_stops_at_the_durable_offset(config: MessageStoreConfig) -> None:
    config = dataclasses.replace(config, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    release = trio.Event()

    async def gated_flusher(mapped_file: MappedFile) -> None:
        await release.wait()
        await thread_flusher(mapped_file)

    async with DefaultMessageStore.open(config, flusher=gated_flusher) as store:
        for _ in range(5):
            await store.put_message(make_msg(wait_store_msg_ok=False))
        assert store.max_offset > 0
        with CommitLogReader(config.store_path_root_dir) as reader:
            assert reader.durable_offset() == 0
            assert list(reader.iter_records(0)) == []
            release.set()
            await wait_until(lambda: store.flushed_where >= store.max_offset)
            assert reader.durable_offset() == store.max_offset
            assert len(list(reader.iter_records(0))) == 5


async def test_next_boundary_at_every_byte(config: MessageStoreConfig) -> None:
    offsets = await _fill(config, 40)
    with CommitLogReader(config.store_path_root_dir) as reader:
        durable = reader.durable_offset()
        starts = [r.physical_offset for r in reader.iter_records(0, include_body=False)]
        assert starts == offsets
        for offset in range(0, durable):
            expected = next((s for s in starts if s >= offset), None)
            assert reader.next_boundary(offset) == expected, offset
        assert reader.next_boundary(durable) is None
        first_in_second = next(s for s in starts if s >= SEGMENT)
        middle = starts[5] + 3
        records = list(
            reader.iter_records(reader.next_boundary(middle) or 0, end=first_in_second + 1)
        )
        assert (
            records[0].physical_offset == starts[6]
            and records[-1].physical_offset == first_in_second
        )


async def test_next_boundary_finds_a_record_whose_body_is_damaged(
    config: MessageStoreConfig,
) -> None:
    """A resync must land where a sequential read would: on the damaged record, reported as
    such, not on the record after it (that would drop the damaged one without a word)."""
    offsets = await _fill(config, 6)
    damaged = offsets[3]
    segment = os.path.join(config.store_path_root_dir, "commitlog", f"{0:020d}")
    body_at = read_file(segment).index(b"body-3", damaged)
    patch_file(segment, body_at, b"B")
    with CommitLogReader(config.store_path_root_dir) as reader:
        for offset in (offsets[2] + 1, damaged):
            assert reader.next_boundary(offset) == damaged
        records = list(reader.iter_records(damaged, verify_crc=True))
        assert [(r.physical_offset, r.crc_ok) for r in records[:2]] == [
            (damaged, False),
            (offsets[4], True),
        ]


async def test_store_without_flushoffset_reads_to_the_last_valid_record(
    config: MessageStoreConfig,
) -> None:
    offsets = await _fill(config, 30)
    root = config.store_path_root_dir
    os.unlink(os.path.join(root, "flushoffset"))
    last_base = offsets[-1] - offsets[-1] % SEGMENT
    with CommitLogReader(root) as reader:
        records = list(reader.iter_records(0))
        assert [r.physical_offset for r in records] == offsets
        end = offsets[-1] + records[-1].total_size
        assert reader.durable_offset() == end
    segment = os.path.join(config.store_path_commit_log, f"{last_base:020d}")
    patch_file(segment, end - last_base, b"\x00\x00\x00\x40garbage")  # torn, after the end
    with CommitLogReader(root) as reader:
        assert reader.durable_offset() == end
    # A damaged body in the middle hides nothing after it: it is reported, not taken as the end.
    first = os.path.join(config.store_path_commit_log, f"{0:020d}")
    patch_file(first, read_file(first).index(b"body-3", offsets[3]), b"B")
    with CommitLogReader(root) as reader:
        assert reader.durable_offset() == end
        crc = [(r.physical_offset, r.crc_ok) for r in reader.iter_records(0, verify_crc=True)]
        assert [offset for offset, _ in crc] == offsets
        assert [offset for offset, ok in crc if not ok] == [offsets[3]]
    # ...while a damaged last record is a torn tail: the end stops before it.
    patch_file(segment, read_file(segment).index(b"body-29", offsets[-1] - last_base), b"B")
    with CommitLogReader(root) as reader:
        assert reader.durable_offset() == offsets[-1]


_CHILD = """
import sys, time
from store.reader import CommitLogReader
seen = 0
stop = time.monotonic() + float(sys.argv[2])
while time.monotonic() < stop:
    with CommitLogReader(sys.argv[1]) as reader:
        count = 0
        for rec in reader.iter_records(reader.min_offset):
            assert rec.crc_ok and rec.body.startswith(b"live-"), rec
            count += 1
        assert count >= seen
        seen = count
print(seen)
"""


async def test_reader_in_another_process_while_writing(config: MessageStoreConfig) -> None:
    config = dataclasses.replace(config, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    async with DefaultMessageStore.open(config) as store:
        child = await trio.lowlevel.open_process(
            [sys.executable, "-c", _CHILD, config.store_path_root_dir, "1.5"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
        )
        written = 0
        with trio.fail_after(20):
            while child.poll() is None:
                await store.put_message(make_msg(b"live-%d" % written + b"." * (written % 500)))
                written += 1
                if written % 50 == 0:
                    await trio.sleep(0.01)
            assert child.stdout is not None
            output = await child.stdout.receive_some()
    assert child.returncode == 0
    assert 0 < int(output.decode()) <= written


async def test_records_before_a_corrupt_one_are_yielded_then_it_raises(
    config: MessageStoreConfig,
) -> None:
    offsets = await _fill(config, 30)
    victim = offsets[17]
    base = victim - victim % SEGMENT
    segment = os.path.join(config.store_path_commit_log, f"{base:020d}")
    patch_file(segment, victim - base + 28, (12345).to_bytes(8, "big"))  # PHYSICALOFFSET
    seen: list[int] = []
    with CommitLogReader(config.store_path_root_dir) as reader:
        with pytest.raises(RecordFormatError) as caught:
            seen.extend(r.physical_offset for r in reader.iter_records(0))
        assert seen == offsets[:17]
        assert caught.value.offset == victim and "12345" in caught.value.reason
        patch_file(segment, victim - base + 4, b"\x00\x00\x00\x00")  # MAGICCODE
        with pytest.raises(RecordFormatError, match="no magic code"):
            list(reader.iter_records(offsets[16]))
