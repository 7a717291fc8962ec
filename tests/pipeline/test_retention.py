"""The `commitlog` source on a store whose retention deleted segments: reads start at the first
kept record, offsets below it follow failOnDataLoss, and a segment deleted between planning and
reading is a clean DataLossError (or no rows with failOnDataLoss=false), never a crash."""

from __future__ import annotations

import dataclasses
import os
import pathlib

import pytest
import trio
from pyspark.sql import SparkSession

from pipeline import columnar, splits
from pipeline.columnar import DataLossError
from store.config import FlushDiskType
from store.message_store import DefaultMessageStore
from store.reader import CommitLogReader
from tests.pipeline import stores

OPTIONS = columnar.DecodeOptions(include_body=False, verify_crc=True)


async def write_then_expire(root: str, count: int, old_segments: int) -> None:
    """`count` messages, then retention deletes the `old_segments` oldest segments."""
    config = dataclasses.replace(
        stores.config(root),
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        clean_resource_interval=3_600_000,
        delete_when="4",
        delete_physic_files_interval=0,
    )
    async with DefaultMessageStore.open(config) as store:
        await stores.put_all(store, [stores.message(i) for i in range(count)])
        # the dispatcher and the index read the old segments too: retention defers a segment a
        # reader still holds, so let them reach the end first
        consume = store.consume
        assert consume is not None
        with trio.fail_after(30):
            while consume.dispatched_offset < store.max_offset or (  # noqa: ASYNC110
                consume.index is not None and consume.index.indexed_offset < store.max_offset
            ):
                await trio.sleep(0.01)
        age([f.file_name for f in store.mapped_file_queue.mapped_files[:old_segments]])
        store.clean_commit_log.hour = lambda: 4
        assert await store.clean_commit_log.run_round() == old_segments


def age(paths: list[str]) -> None:
    """Make the segments look last written 100 hours ago."""
    past = os.path.getmtime(paths[0]) - 100 * 3600
    for path in paths:
        os.utime(path, (past, past))


def kept(root: str) -> list[int]:
    with CommitLogReader(root) as reader:
        return [r.physical_offset for r in reader.iter_records(reader.min_offset)]


def test_a_segment_deleted_after_planning_is_data_loss(tmp_path: pathlib.Path) -> None:
    root = str(tmp_path / "store")
    stores.write_mixed_sync(root, 400)
    bounds = splits.store_bounds(root)
    assert len(bounds.segments) >= 3
    planned = splits.plan(bounds, root, bounds.min_offset, bounds.durable_offset, 1 << 30)
    first_path = bounds.segments[0][1]
    os.unlink(first_path)  # what the broker's retention does meanwhile
    gone = next(s for s in planned if s.path == first_path)
    with pytest.raises(DataLossError, match=r"deleted by retention.*failOnDataLoss=false"):
        list(splits.read_split(gone, OPTIONS))
    lenient = dataclasses.replace(OPTIONS, fail_on_data_loss=False)
    assert list(splits.read_split(gone, lenient)) == []
    others = [s for s in planned if s.path != first_path]
    rows = sum(b.num_rows for s in others for b in splits.read_split(s, lenient))
    assert rows == len(kept(root))
    # Planning on bounds taken before the deletion: the same choice.
    with pytest.raises(DataLossError):
        splits.plan(bounds, root, bounds.min_offset, bounds.durable_offset, 4096)
    replanned = splits.plan(
        bounds, root, bounds.min_offset, bounds.durable_offset, 4096, fail_on_data_loss=False
    )
    assert all(s.path != first_path for s in replanned)


def test_batch_reads_of_a_store_retention_cut(tmp_path: pathlib.Path, spark: SparkSession) -> None:
    root = str(tmp_path / "store")
    trio.run(write_then_expire, root, 400, 2)
    expected = kept(root)
    with CommitLogReader(root) as reader:
        first = reader.min_offset
    assert first > 0 and expected[0] == first

    def offsets(**options: str) -> list[int]:
        frame = spark.read.format("commitlog").options(**options).load(root)
        return sorted(row.physical_offset for row in frame.select("physical_offset").collect())

    assert offsets() == expected  # earliest: the first kept record
    assert offsets(startingOffsets="0", failOnDataLoss="false") == expected
    with pytest.raises(Exception, match="deleted"):
        offsets(startingOffsets="0")
