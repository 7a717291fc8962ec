"""Streaming offsets without Spark: durable bound, admission control, data loss, planning."""

from __future__ import annotations

import os
import pathlib

import pytest
import trio
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes

from pipeline import columnar, splits
from pipeline.options import SourceOptions
from pipeline.source import DataLossError
from pipeline.stream import CommitLogStreamReader, admit
from store.message_store import DefaultMessageStore
from store.reader import CommitLogReader
from tests.pipeline import stores


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[stores.Put]]:
    root = str(tmp_path_factory.mktemp("offsets") / "store")
    return root, stores.write_mixed_sync(root, 300)


def stream_reader(root: str, **options: str) -> CommitLogStreamReader:
    return CommitLogStreamReader(SourceOptions.parse({"path": root, **options}))


def sizes_by_offset(root: str) -> dict[int, int]:
    with CommitLogReader(root) as reader:
        return {r.physical_offset: r.total_size for r in reader.iter_records(reader.min_offset)}


def test_admission_walks_across_blanks_within_the_limit(
    mixed: tuple[str, list[stores.Put]],
) -> None:
    root, _ = mixed
    sizes = sizes_by_offset(root)
    bounds = splits.store_bounds(root)
    start, covered = bounds.min_offset, list[int]()
    while start < bounds.durable_offset:
        end = admit(bounds, start, bounds.durable_offset, 5000)
        inside = [offset for offset in sizes if start <= offset < end]
        assert inside and (sum(sizes[o] for o in inside) <= 5000 or len(inside) == 1)
        assert end in sizes or end == bounds.durable_offset or end % stores.SEGMENT_BYTES == 0
        start, covered = end, covered + inside
    assert start == bounds.durable_offset
    assert covered == sorted(sizes)


def test_latest_offset_is_the_durable_offset_and_respects_limits(
    mixed: tuple[str, list[stores.Put]],
) -> None:
    root, _ = mixed
    reader = stream_reader(root, maxBytesPerTrigger="2000")
    bounds = splits.store_bounds(root)
    start = reader.initialOffset()
    assert start == {"offset": 0}
    assert reader.getDefaultReadLimit() == ReadMaxBytes(2000)
    assert reader.latestOffset(start, ReadAllAvailable()) == {"offset": bounds.durable_offset}
    limited = reader.latestOffset(start, ReadMaxBytes(2000))["offset"]
    assert 0 < limited < bounds.durable_offset
    assert stream_reader(root, startingOffsets="latest").initialOffset() == {
        "offset": bounds.durable_offset
    }


def test_partitions_of_a_micro_batch_read_exactly_its_records(
    mixed: tuple[str, list[stores.Put]],
) -> None:
    root, puts = mixed
    reader = stream_reader(root, splitBytes="3001")
    offsets = sorted(p.offset for p in puts)
    start, end = {"offset": offsets[10]}, {"offset": offsets[200]}
    got: list[int] = []
    for split in reader.partitions(start, end):
        for batch in reader.read(split):
            got += batch.column("physical_offset").to_pylist()
    assert got == offsets[10:200]
    assert reader.partitions(end, end) == []


def test_offsets_never_pass_the_durable_offset(tmp_path: pathlib.Path) -> None:
    root = str(tmp_path / "store")
    stores.append_sync(root, [stores.message(i) for i in range(10)])
    lazy = stores.config(
        root, flush_interval_commit_log_ms=600_000, flush_commit_log_least_pages=10_000
    )

    async def check() -> None:
        async with DefaultMessageStore.open(lazy) as store:
            durable = splits.store_bounds(root).durable_offset
            await stores.put_all(store, [stores.message(i) for i in range(10, 15)])
            assert store.max_offset > durable
            reader = stream_reader(root)
            reader.prepareForTriggerAvailableNow()
            assert reader.latestOffset({"offset": 0}, ReadAllAvailable()) == {"offset": durable}
            rows = [
                row
                for split in reader.partitions({"offset": 0}, {"offset": durable})
                for row in reader.read(split)
            ]
            assert sum(batch.num_rows for batch in rows) == 10

    trio.run(check)


def test_checkpoint_below_the_first_segment_is_data_loss(
    mixed: tuple[str, list[stores.Put]], tmp_path: pathlib.Path
) -> None:
    root, _ = mixed
    copy = tmp_path / "store"
    os.makedirs(copy / "commitlog")
    bounds = splits.store_bounds(root)
    for base, path in bounds.segments[1:]:
        os.link(path, copy / "commitlog" / f"{base:020d}")
    os.link(os.path.join(root, "flushoffset"), copy / "flushoffset")
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        stream_reader(str(copy)).latestOffset({"offset": 0}, ReadAllAvailable())
    lenient = stream_reader(str(copy), failOnDataLoss="false")
    first = bounds.segments[1][0]
    end = lenient.latestOffset({"offset": 0}, ReadAllAvailable())
    assert end == {"offset": bounds.durable_offset}
    planned = lenient.partitions({"offset": 0}, end)
    assert isinstance(planned[0], splits.Split) and planned[0].lo == first


def test_corrupt_header_below_durable_offset_fails_the_walk(
    mixed: tuple[str, list[stores.Put]], tmp_path: pathlib.Path
) -> None:
    root, puts = mixed
    bounds = splits.store_bounds(root)
    victim = sorted(p.offset for p in puts)[5]
    copy = tmp_path / "seg"
    data = bytearray(pathlib.Path(bounds.segments[0][1]).read_bytes())
    data[victim + 4 : victim + 8] = b"\x12\x34\x56\x78"
    copy.write_bytes(bytes(data))
    broken = splits.StoreBounds(((0, str(copy)),), bounds.segment_size, 0, bounds.durable_offset)
    with pytest.raises(columnar.CorruptRecordError) as caught:
        admit(broken, 0, bounds.durable_offset, 1 << 30)
    assert caught.value.offset == victim
