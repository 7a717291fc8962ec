"""The `commitlog` PySpark data source and its batch reader.

Owns the Spark-facing classes: `CommitLogDataSource` (name, schema, readers) and
`CommitLogBatchReader` (resolves the offset range on the driver, plans splits, reads them on the
executors). Every object here is pickled to workers, so none holds a file, a mapping or a reader.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from pipeline import columnar, options, splits
from pipeline.columnar import DataLossError
from pipeline.schema import spark_schema

#: this module is imported by every executor, which needs no more than reading does: standard
#: logging (no structlog), and the store's reader (msgpack, structlog) only on the driver
log = logging.getLogger(__name__)

__all__ = [
    "CommitLogBatchReader",
    "CommitLogDataSource",
    "DataLossError",  # raised by the reads; defined beside the executors' other errors
    "checked_start",
    "decode_options",
    "read_partition",
    "snap_to_record",
]


class CommitLogDataSource(DataSource):
    """`spark.read.format("commitlog").load(store_dir)`: one row per stored message."""

    @classmethod
    def name(cls) -> str:
        return "commitlog"

    def schema(self) -> StructType:
        return spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        return CommitLogBatchReader(self._parsed())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        from pipeline.stream import CommitLogStreamReader

        return CommitLogStreamReader(self._parsed())

    def _parsed(self) -> options.SourceOptions:
        parsed = options.SourceOptions.parse(self.options)
        if not os.path.isdir(os.path.join(parsed.store_dir, "commitlog")):
            raise options.CommitLogOptionError(
                "path", f"{parsed.store_dir} is not a store directory (no commitlog/ inside)"
            )
        return parsed


def decode_options(opts: options.SourceOptions) -> columnar.DecodeOptions:
    return columnar.DecodeOptions(
        include_body=opts.include_body,
        verify_crc=opts.verify_crc,
        fail_on_crc_error=opts.fail_on_crc_error,
        topics=opts.topics,
        fail_on_data_loss=opts.fail_on_data_loss,
    )


def checked_start(offset: int, bounds: splits.StoreBounds, fail_on_data_loss: bool) -> int:
    """`offset`, or the first segment's base when records below it are gone and that is allowed."""
    if offset >= bounds.min_offset:
        return offset
    if fail_on_data_loss:
        raise DataLossError(
            f"offset {offset} is below the first segment (offset {bounds.min_offset}): those "
            "records were deleted; set failOnDataLoss=false to continue from the earliest offset"
        )
    log.warning("commitlog_data_loss requested=%d earliest=%d", offset, bounds.min_offset)
    return bounds.min_offset


def snap_to_record(store_dir: str, offset: int, bounds: splits.StoreBounds) -> int:
    """The first record start at or after `offset` (a given offset may fall inside a record)."""
    if offset >= bounds.durable_offset:
        return bounds.durable_offset
    if any(offset == base for base, _ in bounds.segments):
        return offset
    for base, path in bounds.segments:
        if base < offset < base + bounds.segment_size:
            # Hop record sizes from the segment's base (a body may hold a record image).
            starts = splits.first_record_starts(path, base, [offset], bounds.durable_offset)
            if starts is None:  # deleted since the bounds were read: the next segment's base
                return min(base + bounds.segment_size, bounds.durable_offset)
            (first,) = starts
            if first is None:  # nothing starts after it in this segment: the next one's base
                return min(base + bounds.segment_size, bounds.durable_offset)
            if first != splits.RESYNC:
                return first
    from store.reader import CommitLogReader

    reader = CommitLogReader(store_dir)  # past a damaged header: resync by structure
    try:
        found = reader.next_boundary(offset)
    finally:
        reader.close()
    return bounds.durable_offset if found is None else min(int(found), bounds.durable_offset)


def read_partition(
    partition: InputPartition, opts: options.SourceOptions
) -> Iterator[pa.RecordBatch]:
    """The rows of one planned split. An empty plan still gets one task from Spark, with a bare
    `InputPartition(None)`: it has no rows."""
    if not isinstance(partition, splits.Split):
        return iter(())
    return splits.read_split(partition, decode_options(opts))


class CommitLogBatchReader(DataSourceReader):
    """Reads `[startingOffsets, endingOffsets)`, never past the durable offset at planning time."""

    def __init__(self, opts: options.SourceOptions) -> None:
        self.opts = opts
        bounds = splits.store_bounds(opts.store_dir)
        self.start, self.end = self._range(bounds)
        self.planned = splits.plan(
            bounds,
            opts.store_dir,
            self.start,
            self.end,
            opts.split_bytes,
            fail_on_data_loss=opts.fail_on_data_loss,
        )
        log.info(
            "commitlog_batch_planned store=%s start=%d end=%d splits=%d",
            opts.store_dir,
            self.start,
            self.end,
            len(self.planned),
        )

    def _range(self, bounds: splits.StoreBounds) -> tuple[int, int]:
        opts = self.opts
        end = bounds.durable_offset
        if isinstance(opts.ending_offsets, int):
            end = min(end, opts.ending_offsets)
        start = opts.starting_offsets
        if start == options.EARLIEST:
            start = bounds.min_offset
        elif start == options.LATEST:
            start = bounds.durable_offset
        else:
            assert isinstance(start, int)
            start = snap_to_record(
                opts.store_dir, checked_start(start, bounds, opts.fail_on_data_loss), bounds
            )
        return start, max(start, end)

    def partitions(self) -> Sequence[InputPartition]:
        return self.planned

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.opts)
