"""Streaming through Spark into Parquet: exactly once across appends, a mid-batch stop and a
restart from the checkpoint; maxBytesPerTrigger batches."""

from __future__ import annotations

import json
import pathlib
import threading
import time
from typing import TYPE_CHECKING, Any

from tests.pipeline import stores

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

DEADLINE_S = 60


def start(
    spark: SparkSession, root: str, out: pathlib.Path, checkpoint: pathlib.Path, **kw: Any
) -> StreamingQuery:
    options = {key: str(value) for key, value in kw.items() if key != "available_now"}
    writer = (
        spark.readStream.format("commitlog")
        .options(includeBody="false", **options)
        .load(root)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
    )
    if kw.get("available_now"):
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime="200 milliseconds").start()


def finish(query: StreamingQuery) -> None:
    assert query.awaitTermination(DEADLINE_S), "AvailableNow query did not finish"
    assert query.exception() is None


def exported(spark: SparkSession, out: pathlib.Path) -> list[int]:
    return sorted(
        row[0] for row in spark.read.parquet(str(out)).select("physical_offset").collect()
    )


def offset_of(reported: str | dict[str, int] | None) -> int:
    """A source offset from query progress (JSON text; null for the first batch's start)."""
    parsed = json.loads(reported) if isinstance(reported, str) else reported
    return 0 if parsed is None else int(parsed["offset"])


def test_exactly_once_across_appends_stop_and_restart(
    spark: SparkSession, tmp_path: pathlib.Path
) -> None:
    root, out, checkpoint = str(tmp_path / "store"), tmp_path / "out", tmp_path / "ck"
    puts = stores.append_sync(root, [stores.message(i) for i in range(150)])
    finish(start(spark, root, out, checkpoint, available_now=True))
    assert exported(spark, out) == sorted(p.offset for p in puts)

    query = start(spark, root, out, checkpoint, maxBytesPerTrigger=4096)
    for round_ in range(3):  # the broker keeps writing while the query runs
        puts += stores.append_sync(root, [stores.message(1000 * round_ + i) for i in range(60)])
    deadline = time.monotonic() + DEADLINE_S
    while not any(progress.numInputRows for progress in query.recentProgress):
        assert time.monotonic() < deadline, "no micro-batch ran"
        time.sleep(0.05)
    stopper = threading.Timer(0.1, query.stop)  # lands inside a running micro-batch most times
    stopper.start()
    query.awaitTermination(DEADLINE_S)
    stopper.join()
    puts += stores.append_sync(root, [stores.message(5000 + i) for i in range(40)])

    finish(start(spark, root, out, checkpoint, available_now=True))
    offsets = exported(spark, out)
    assert offsets == sorted(p.offset for p in puts)
    assert len(offsets) == len(set(offsets)) == 150 + 180 + 40


def test_max_bytes_per_trigger_gives_batches_within_the_limit(
    spark: SparkSession, tmp_path: pathlib.Path
) -> None:
    root, out, checkpoint = str(tmp_path / "store"), tmp_path / "out", tmp_path / "ck"
    puts = stores.append_sync(root, [stores.message(i) for i in range(120)])
    limit = 12_000
    query = start(spark, root, out, checkpoint, available_now=True, maxBytesPerTrigger=limit)
    finish(query)
    size_at = {p.offset: 0 for p in puts}
    for row in spark.read.parquet(str(out)).select("physical_offset", "size").collect():
        size_at[row[0]] = row[1]
    assert sorted(size_at) == exported(spark, out)
    batches = [p for p in query.recentProgress if p.numInputRows > 0]
    assert len(batches) >= sum(size_at.values()) // limit
    for progress in batches:
        source = progress.sources[0]
        begin, end = offset_of(source.startOffset), offset_of(source.endOffset)
        inside = [size for offset, size in size_at.items() if begin <= offset < end]
        assert len(inside) == progress.numInputRows
        assert sum(inside) <= limit
