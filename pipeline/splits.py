"""Splits of a physical-offset range and the task-side read of one split.

Owns how `[start, end)` of the commit log is cut into Spark input partitions and how a task turns
its partition into Arrow batches. A split covers the records whose start lies in `[lo, hi)` of one
segment; its last record may run past `hi`. Where records start is known only by hopping their
sizes from a segment's base: a message body may hold anything, a whole record image with a
matching offset field included, so searching for a record-like pattern at a cut could turn part
of a body into a row. The planner therefore walks the headers of a segment it cuts (the size and
magic of each record, one pass per segment) and starts every split at a record start it reached.
Only past a damaged header, where no walk goes on, does a split fall back to a resync by
structure (`store.decode.find_record_boundary`). Callers keep `end` at or below the durable offset,
which is always a record boundary, so no split ever reaches a half-written record.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from pipeline import columnar
from store import decode, layout
from store.decode import RecordFormatError, find_record_boundary
from store.layout import Buffer
from store.segment_view import open_segment

#: executors log through the standard library and import no more of the store than reading needs
#: (no store.reader: its checkpoint and mapped-file modules bring msgpack and structlog)
_log = logging.getLogger(__name__)

#: a cut that the header walk could not reach (a damaged header before it): resync when read
RESYNC = -1


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
    """Snapshot of the store's segments and durable offset, read through the store's reader.
    Runs on the driver only."""
    from store.reader import CommitLogReader

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
    bounds: StoreBounds,
    store_dir: str,
    start: int,
    end: int,
    split_bytes: int,
    *,
    fail_on_data_loss: bool = True,
) -> list[Split]:
    """Cut `[start, end)` into splits of at most `split_bytes`; `start` must be a record start.

    A segment that retention deleted since `bounds` were taken raises DataLossError, or is left
    out when `fail_on_data_loss` is false."""
    splits: list[Split] = []
    for base, path in bounds.segments:
        lo, hi = max(start, base), min(end, base + bounds.segment_size)
        cuts = list(range(lo, hi, split_bytes))
        known = {lo} if lo in (base, start) else set()
        inexact = [cut for cut in cuts if cut not in known]
        found = first_record_starts(path, base, inexact, hi)
        if found is None:
            if cuts:
                data_loss(path, lo, fail_on_data_loss)
            continue
        firsts = dict(zip(inexact, found, strict=True))
        for cut in cuts:
            split_hi = min(hi, cut + split_bytes)
            first = firsts.get(cut, cut)
            if first == RESYNC:
                splits.append(Split(store_dir, path, base, cut, split_hi, exact=False))
            elif first is not None and first < split_hi:
                splits.append(Split(store_dir, path, base, first, split_hi, exact=True))
    return splits


def first_record_starts(path: str, base: int, cuts: list[int], end: int) -> list[int | None] | None:
    """For each of `cuts` (ascending physical offsets in the segment at `base`), the first record
    start at or after it and below `end`, found by hopping record sizes from the segment's base;
    None for the whole when the segment is gone (retention).

    None where no record starts in `[cut, end)`; RESYNC for cuts past a header that is not a
    record (a damaged log: the split that holds the damage reports it when read).
    """
    if not cuts:  # nothing to find: the segment is only read by the tasks
        return [] if os.path.exists(path) else None
    view = open_segment(path)
    if view is None:
        return None if not os.path.exists(path) else [None] * len(cuts)
    with view:
        return _hop_to_cuts(view.mm, base, cuts, end)


def data_loss(path: str, offset: int, fail: bool) -> None:
    """A segment retention deleted before it was read: DataLossError, or one warning."""
    message = (
        f"{os.path.basename(path)} (physical offset {offset}) was deleted by retention before it "
        "was read; set failOnDataLoss=false to go on without what was deleted"
    )
    if fail:
        raise columnar.DataLossError(message)
    _log.warning("commitlog_data_loss %s", message)


def _hop_to_cuts(data: Buffer, base: int, cuts: list[int], end: int) -> list[int | None]:
    unpack = layout.SIZE_MAGIC.unpack_from
    magic_code, min_size, size_limit = (
        layout.MESSAGE_MAGIC_CODE,
        layout.MIN_RECORD_SIZE,
        len(data),
    )
    stop = min(end - base, size_limit)
    found: list[int | None] = []
    pos = 0
    for cut in cuts:
        target = cut - base
        while pos < target and pos < stop:
            size, magic = unpack(data, pos) if pos + 8 <= size_limit else (0, 0)
            if not (magic == magic_code and min_size <= size <= size_limit - pos):
                try:
                    size = decode.record_step(data, pos, base + pos, size_limit)
                except RecordFormatError:
                    return found + [RESYNC] * (len(cuts) - len(found))
                if size == 0:  # BLANK: no record after it in this segment
                    pos = stop
                    break
            pos += size
        found.append(base + pos if pos < stop else None)
    return found


def read_split(split: Split, options: columnar.DecodeOptions) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the split's records, in offset order. Runs on an executor."""
    first = split.lo if split.exact else _resync(split)
    if first is None or first >= split.hi:
        return
    # Mapped under the shared lock the store's cleanup waits for; gone means deleted.
    view = open_segment(split.path)
    if view is None:
        if not os.path.exists(split.path):
            data_loss(split.path, split.lo, options.fail_on_data_loss)
        return
    with view:  # closing leaves a mapping a numpy view still uses to the garbage collector
        segment = columnar.Segment(view.mm, split.base, split.path)
        yield from columnar.read_range(segment, first - split.base, split.hi - split.base, options)


def _resync(split: Split) -> int | None:
    """First record start in `[split.lo, split.hi)` of the split's segment, or None.

    Found by structure (`store.decode.find_record_boundary`, without the body CRC, as the store
    reader's resync does). A record starting below `hi` starts below the durable offset, so it is
    whole: the search may look at the whole mapping."""
    view = open_segment(split.path)
    if view is None:
        return None
    with view:
        found = find_record_boundary(
            view.mm, split.lo - split.base, split.base, len(view.mm), verify_crc=False
        )
    if found is None or split.base + found >= split.hi:
        return None
    return split.base + found
