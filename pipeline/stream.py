"""The streaming reader of the `commitlog` source.

Owns micro-batch offsets: `{"offset": <physical offset>}`, always a record start and never past
the store's durable offset (the flushoffset file), so a micro-batch never sees a half-written
record. Admission control (`maxBytesPerTrigger`) walks record headers forward from the batch start;
without a limit the end is the durable offset itself, at no cost. `partitions(start, end)` is a
pure function of its arguments and the files, because Spark replays a logged batch in a fresh
process after a restart.
"""

from __future__ import annotations

import logging
import mmap
from collections.abc import Iterator, Sequence
from contextlib import ExitStack

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    SupportsTriggerAvailableNow,
)

from pipeline import columnar, options, splits
from pipeline.source import checked_start, read_partition, snap_to_record
from store.columns import walk
from store.segment_view import open_segment

#: imported by every executor: standard logging, as in pipeline.source
log = logging.getLogger(__name__)


class CommitLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("commitlog")`: exactly-once micro-batches by physical offset."""

    def __init__(self, opts: options.SourceOptions) -> None:
        self.opts = opts
        self.target: int | None = None  # end offset fixed by Trigger.AvailableNow

    def initialOffset(self) -> dict[str, int]:  # noqa: N802
        bounds = splits.store_bounds(self.opts.store_dir)
        start = self.opts.starting_offsets
        if start == options.EARLIEST:
            return {"offset": bounds.min_offset}
        if start == options.LATEST:
            return {"offset": bounds.durable_offset}
        assert isinstance(start, int)
        checked = checked_start(start, bounds, self.opts.fail_on_data_loss)
        return {"offset": snap_to_record(self.opts.store_dir, checked, bounds)}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        if self.opts.max_bytes_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxBytes(self.opts.max_bytes_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self.target = splits.store_bounds(self.opts.store_dir).durable_offset
        log.info("commitlog_available_now target=%d", self.target)

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:  # noqa: N802
        bounds = splits.store_bounds(self.opts.store_dir)
        begin = checked_start(int(start["offset"]), bounds, self.opts.fail_on_data_loss)
        end = (
            bounds.durable_offset
            if self.target is None
            else min(self.target, bounds.durable_offset)
        )
        if end <= begin:
            return {"offset": begin}
        if isinstance(limit, ReadMaxBytes):
            end = admit(bounds, begin, end, limit.max_bytes)
        return {"offset": end}

    def reportLatestOffset(self) -> dict[str, int]:  # noqa: N802
        return {"offset": splits.store_bounds(self.opts.store_dir).durable_offset}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        bounds = splits.store_bounds(self.opts.store_dir)
        begin = checked_start(int(start["offset"]), bounds, self.opts.fail_on_data_loss)
        stop = int(end["offset"])
        return splits.plan(
            bounds,
            self.opts.store_dir,
            begin,
            stop,
            self.opts.split_bytes,
            fail_on_data_loss=self.opts.fail_on_data_loss,
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.opts)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the checkpoint is the only record of progress."""


def admit(bounds: splits.StoreBounds, start: int, end: int, max_bytes: int) -> int:
    """The furthest record start in `(start, end]` whose records since `start` fit `max_bytes`.

    At least one record is admitted, so a record larger than the limit still makes progress.
    BLANK end-of-file markers are skipped and do not count as bytes. Records are found by the
    store's header walk (`store.columns.walk`).
    """
    paths = dict(bounds.segments)
    admitted, pos = 0, start
    with ExitStack() as stack:
        mapped: dict[int, mmap.mmap] = {}
        while pos < end:
            base = pos - pos % bounds.segment_size
            if base not in mapped:
                view = open_segment(paths[base])
                if view is None:  # deleted meanwhile: the batch ends here, planning reports it
                    return pos if admitted else end
                mapped[base] = stack.enter_context(view).mm
            # Only records starting before `pos + room` may still fit (or be the first one).
            room = max(max_bytes - admitted, 1)
            run = walk(mapped[base], pos - base, min(end, pos + room) - base, base=base)
            for size in run.sizes:
                if admitted and admitted + size > max_bytes:
                    return pos
                admitted += size
                pos += size
            if run.error is not None:
                raise columnar.CorruptRecordError(paths[base], run.error.offset, run.error.reason)
            if run.ended:
                pos = base + bounds.segment_size
            elif not run.sizes:
                break
    return min(pos, end)
