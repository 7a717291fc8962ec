"""Splits of a physical-offset range and the task-side read of one split.

Owns how `[start, end)` of the commit log is cut into Spark input partitions and how a task turns
its partition into Arrow batches. A split covers the records whose start lies in `[lo, hi)` of one
segment; its last record may run past `hi`. A split that does not begin at a known record start
(segment base or the range start) finds its first record with the store reader's resync
(`CommitLogReader.next_boundary`: magic, the record's own stored offset, sizes; a damaged body is
still found and reported, never skipped), so cuts at arbitrary bytes never lose or repeat a
record. Callers keep `end` at or below the durable offset, which is always a record boundary, so
no split ever reaches a half-written record.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from pipeline import columnar
from store.reader import CommitLogReader


@dataclass(frozen=True)
class Split(InputPartition):
    """Records starting in `[lo, hi)` (physical offsets) of the segment at `base`."""

    store_dir: str
    path: str
    base: int
    lo: int
    hi: int
    exact: bool  # lo is a known record start; otherwise resync first


@dataclass(frozen=True, slots=True)
class StoreBounds:
    """What the driver sees of the store when planning: segments, sizes, offsets."""

    segments: tuple[tuple[int, str], ...]
    segment_size: int
    min_offset: int
    durable_offset: int


def store_bounds(store_dir: str) -> StoreBounds:
    """Snapshot of the store's segments and durable offset, read through the store's reader."""
    reader = CommitLogReader(store_dir)
    try:
        segments = tuple((int(base), str(path)) for base, path in reader.segments)
        return StoreBounds(
            segments=segments,
            segment_size=int(reader.segment_size),
            min_offset=int(reader.min_offset),
            durable_offset=int(reader.durable_offset()),
        )
    finally:
        reader.close()


def plan(
    bounds: StoreBounds, store_dir: str, start: int, end: int, split_bytes: int
) -> list[Split]:
    """Cut `[start, end)` into splits of at most `split_bytes`; `start` must be a record start."""
    splits: list[Split] = []
    for base, path in bounds.segments:
        lo, hi = max(start, base), min(end, base + bounds.segment_size)
        for cut in range(lo, hi, split_bytes):
            exact = cut == lo and cut in (base, start)
            splits.append(Split(store_dir, path, base, cut, min(hi, cut + split_bytes), exact))
    return splits


def read_split(split: Split, options: columnar.DecodeOptions) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the split's records, in offset order. Runs on an executor."""
    first = split.lo if split.exact else _resync(split)
    if first is None or first >= split.hi:
        return
    with open(split.path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            return
        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        segment = columnar.Segment(data, split.base, split.path)
        yield from columnar.read_range(segment, first - split.base, split.hi - split.base, options)
    finally:
        # An error raised while a numpy view of the mapping is alive would make closing raise
        # BufferError over the real error, so leave such a mapping to the garbage collector.
        with contextlib.suppress(BufferError):
            data.close()


def _resync(split: Split) -> int | None:
    """First record start at or after `split.lo` within the split's segment, or None."""
    reader = CommitLogReader(split.store_dir)
    try:
        found = reader.next_boundary(split.lo)
    finally:
        reader.close()
    if found is None or found >= split.base + (split.hi - split.base):
        return None
    return int(found)
