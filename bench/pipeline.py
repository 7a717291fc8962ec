"""Spark `commitlog` source throughput beside the store's own single-process reader.

Writes one million 1 KiB messages straight into 1 GiB segments with the store's encoder (patching
offsets as the writer does), publishes the durable offset in `flushoffset`, then scans the same
data with: the store's `CommitLogReader` in this process (pure-Python path of `store.columns`),
the source's task read in this process (the numpy path of `store.columns` plus Arrow assembly),
and Spark `local[2]` (`format("noop")`, so only the read is timed), with and without body and CRC.
Also times a source that re-yields one decoded batch (no decoding: Spark's own cost per row of
this schema). Prints one line per figure; targets: local[2] >= 1.5x the store reader and >= 500k
rows/s without body. Usage: `python bench/pipeline.py [--messages N] [--repeat R]`.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from bench._common import peak_rss_mib, report
from pipeline import columnar, splits
from pipeline.schema import spark_schema
from store import encode, layout
from store.checkpoint import FlushOffsetFile
from store.message import MessageExtBrokerInner
from store.reader import CommitLogReader

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SEGMENT_BYTES = 1 << 30
BODY_BYTES = 1024
TEMPLATES = 512
CEILING_PARTS = 16


def templates() -> list[bytes]:
    """Encoded records with random bodies, 8 topics and 4 queues; offsets are patched later."""
    rng = random.Random(7)
    out = []
    for index in range(TEMPLATES):
        msg = MessageExtBrokerInner(
            topic=f"bench-{index % 8}",
            queue_id=index % 4,
            body=rng.randbytes(BODY_BYTES),
            properties_string=f"TAGS\x01t{index % 5}\x02KEYS\x01k{index}\x02CLUSTER\x01c\x02",
            born_timestamp=1_700_000_000_000 + index,
            born_host=("10.0.0.2", 40000 + index % 16),
        )
        encoded = encode.encode_record(msg, 1_700_000_000_500, 1 << 22)
        assert isinstance(encoded, tuple)
        out.append(encoded[0])
    return out


def write_store(root: str, count: int) -> int:
    """Segments holding `count` records, BLANK-terminated when full; returns the durable offset."""
    os.makedirs(os.path.join(root, "commitlog"))
    records = templates()
    patch = layout.QUEUE_AND_PHYSICAL_OFFSET.pack_into
    base, written, segment = 0, 0, bytearray(SEGMENT_BYTES)
    pos = 0
    while written < count:
        record = records[written % TEMPLATES]
        if pos + len(record) + layout.END_FILE_MIN_BLANK_LENGTH > SEGMENT_BYTES:
            layout.BLANK_RECORD_HEADER.pack_into(
                segment, pos, SEGMENT_BYTES - pos, layout.BLANK_MAGIC_CODE
            )
            _flush_segment(root, base, segment)
            base, pos, segment = base + SEGMENT_BYTES, 0, bytearray(SEGMENT_BYTES)
            continue
        segment[pos : pos + len(record)] = record
        patch(segment, pos + layout.QUEUEOFFSET_POS, written // 4, base + pos)
        pos += len(record)
        written += 1
    _flush_segment(root, base, segment)
    offsets = FlushOffsetFile(root)
    offsets.update(base + pos, base + pos, SEGMENT_BYTES)
    offsets.sync()
    offsets.close()
    return base + pos


def _flush_segment(root: str, base: int, segment: bytearray) -> None:
    with open(os.path.join(root, "commitlog", f"{base:020d}"), "wb") as handle:
        handle.write(segment)


def timed(label: str, rows: int, run: Callable[[], int], repeat: int, **extra: str) -> float:
    """Best of `repeat` runs; `run` returns the rows it saw, which must equal `rows`."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        seen = run()
        best = min(best, time.perf_counter() - started)
        assert seen == rows, (label, seen, rows)
    report(label, **extra, rows=rows, seconds=best, rows_per_s=round(rows / best))
    return rows / best


def store_reader_scan(root: str, include_body: bool, verify_crc: bool) -> int:
    with CommitLogReader(root) as reader:
        return sum(
            1 for _ in reader.iter_records(reader.min_offset, None, include_body, verify_crc)
        )


def columnar_scan(root: str, include_body: bool, verify_crc: bool) -> int:
    bounds = splits.store_bounds(root)
    options = columnar.DecodeOptions(include_body=include_body, verify_crc=verify_crc)
    planned = splits.plan(bounds, root, bounds.min_offset, bounds.durable_offset, SEGMENT_BYTES)
    return sum(b.num_rows for s in planned for b in splits.read_split(s, options))


def spark_load(spark: SparkSession, root: str, options: dict[str, str]) -> DataFrame:
    return spark.read.format("commitlog").options(**options).load(root)


def spark_scan(spark: SparkSession, root: str, options: dict[str, str], rows: int) -> int:
    """A full scan into the `noop` sink (Spark's pure-read benchmark sink); the row count is
    checked once, outside the timed runs."""
    spark_load(spark, root, options).write.format("noop").mode("overwrite").save()
    return rows


class CeilingPartition(InputPartition):
    def __init__(self, root: str, rows: int) -> None:
        self.root, self.rows = root, rows


class CeilingReader(DataSourceReader):
    """Yields one decoded batch over and over: what Spark alone costs per row of this schema."""

    def __init__(self, root: str, rows: int) -> None:
        self.root, self.rows = root, rows

    def partitions(self) -> list[InputPartition]:
        return [CeilingPartition(self.root, self.rows // CEILING_PARTS)] * CEILING_PARTS

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, CeilingPartition)
        bounds = splits.store_bounds(partition.root)
        first = splits.plan(bounds, partition.root, 0, bounds.durable_offset, SEGMENT_BYTES)[0]
        options = columnar.DecodeOptions(include_body=False, verify_crc=False)
        batch = next(splits.read_split(first, options))
        for start in range(0, partition.rows, batch.num_rows):
            yield batch.slice(0, min(batch.num_rows, partition.rows - start))


class CeilingSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "commitlog_ceiling"

    def schema(self) -> StructType:
        return spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        return CeilingReader(self.options["path"], int(self.options["rows"]))


def spark_ceiling(spark: SparkSession, root: str, rows: int) -> int:
    df = spark.read.format("commitlog_ceiling").option("rows", str(rows)).load(root)
    df.write.format("noop").mode("overwrite").save()
    return rows // CEILING_PARTS * CEILING_PARTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--split-bytes", type=int, default=None, help="the source's splitBytes")
    args = parser.parse_args()
    work = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")
    os.makedirs(work, exist_ok=True)
    root = tempfile.mkdtemp(prefix="pipeline-bench-", dir=work)
    # Workers import this module (the ceiling source) and the project from the repository root.
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))
    try:
        run(root, args.messages, args.repeat, args.split_bytes)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(root: str, count: int, repeat: int, split_bytes: int | None) -> None:
    from pipeline.session import build_session

    started = time.perf_counter()
    durable = write_store(root, count)
    report("pipeline_generate", rows=count, bytes=durable, seconds=time.perf_counter() - started)
    variants = [(True, True), (True, False), (False, True), (False, False)]
    reader_rate = {}
    for body, crc in variants:
        reader_rate[body, crc] = timed(
            "store_reader_1proc",
            count,
            functools.partial(store_reader_scan, root, body, crc),
            1,
            body=str(body),
            crc=str(crc),
        )
    for body, crc in variants:
        timed(
            "columnar_1proc",
            count,
            functools.partial(columnar_scan, root, body, crc),
            1,
            body=str(body),
            crc=str(crc),
        )
    spark = build_session(
        "pipeline-bench",
        master="local[2]",
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
        show_progress=False,
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(CeilingSource)
    ceiling_rows = count // CEILING_PARTS * CEILING_PARTS
    spark_ceiling(spark, root, count)  # warm-up
    timed(
        "spark_local2_ceiling_no_decode",
        ceiling_rows,
        functools.partial(spark_ceiling, spark, root, count),
        repeat,
    )
    extra = {} if split_bytes is None else {"splitBytes": str(split_bytes)}
    counted = spark_load(spark, root, extra).count()  # also warms workers and imports
    assert counted == count, (counted, count)
    for body, crc in variants:
        options = {"includeBody": str(body).lower(), "verifyCrc": str(crc).lower(), **extra}
        rate = timed(
            "spark_local2",
            count,
            functools.partial(spark_scan, spark, root, options, count),
            repeat,
            body=str(body),
            crc=str(crc),
        )
        report("spark_vs_store_reader", body=body, crc=crc, ratio=rate / reader_rate[body, crc])
    spark.stop()
    report("pipeline_bench_done", peak_rss_mib=peak_rss_mib())


if __name__ == "__main__":
    main()
