"""Pipeline jobs over the `commitlog` source: Parquet export, streaming export, statistics.

Owns what each job reads and writes; the CLI (`broker/cli_pipeline.py`) only parses flags and
prints. Jobs take a live `SparkSession` (see `pipeline.session`) and an absolute store path, which
must be readable at the same path by the driver and every executor.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import structlog

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.listener import StreamingQueryProgress
    from pyspark.sql.streaming.query import StreamingQuery

log = structlog.get_logger()

STATS_GROUPINGS: Final = {"topic": ("topic",), "topic,queue": ("topic", "queue_id")}
PROGRESS_INTERVAL_S: Final = 10


class StoreNotFoundError(FileNotFoundError):
    """The store directory has no commitlog/ directory."""


def resolve_store(store_dir: str) -> str:
    """Absolute store path (executors do not share the driver's working directory)."""
    absolute = os.path.abspath(store_dir)
    if not os.path.isdir(os.path.join(absolute, "commitlog")):
        raise StoreNotFoundError(f"{absolute} is not a store directory (no commitlog/ inside)")
    return absolute


def read_store(
    spark: SparkSession, store_dir: str, options: Mapping[str, str] | None = None
) -> DataFrame:
    """The store as a batch DataFrame, up to its durable offset now."""
    return (
        spark.read.format("commitlog").options(**dict(options or {})).load(resolve_store(store_dir))
    )


def export(
    spark: SparkSession,
    store_dir: str,
    out: str,
    options: Mapping[str, str] | None = None,
    mode: str = "errorifexists",
) -> None:
    """Write every message up to the durable offset as Parquet files under `out`."""
    started = time.monotonic()
    read_store(spark, store_dir, options).write.mode(mode).parquet(os.path.abspath(out))
    log.info("pipeline_export_done", out=out, seconds=round(time.monotonic() - started, 3))


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """A streaming export: where to, its checkpoint and how it is triggered."""

    out: str
    checkpoint: str
    available_now: bool = False
    processing_time: str = "5 seconds"
    max_bytes_per_trigger: int | None = None


def start_stream(
    spark: SparkSession,
    store_dir: str,
    settings: StreamSettings,
    options: Mapping[str, str] | None = None,
) -> StreamingQuery:
    """Start the Parquet streaming export; the checkpoint makes restarts exactly-once."""
    reader = spark.readStream.format("commitlog").options(**dict(options or {}))
    if settings.max_bytes_per_trigger is not None:
        reader = reader.option("maxBytesPerTrigger", str(settings.max_bytes_per_trigger))
    writer = (
        reader.load(resolve_store(store_dir))
        .writeStream.format("parquet")
        .option("path", os.path.abspath(settings.out))
        .option("checkpointLocation", os.path.abspath(settings.checkpoint))
    )
    if settings.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=settings.processing_time)
    return writer.start()


def run_stream(
    spark: SparkSession,
    store_dir: str,
    settings: StreamSettings,
    options: Mapping[str, str] | None = None,
) -> None:
    """Run the streaming export until it ends (AvailableNow) or is interrupted, logging progress."""
    query = start_stream(spark, store_dir, settings, options)
    try:
        while not query.awaitTermination(PROGRESS_INTERVAL_S):
            _log_progress(query.lastProgress)
    finally:
        if query.isActive:
            query.stop()
    _log_progress(query.lastProgress)
    if query.exception() is not None:
        raise RuntimeError(f"streaming export failed: {query.exception()}")


def _log_progress(progress: StreamingQueryProgress | None) -> None:
    if progress is not None:
        log.info(
            "pipeline_stream_progress",
            batch=progress.batchId,
            rows=progress.numInputRows,
            rows_per_s=round(progress.processedRowsPerSecond, 1),
            end_offset=progress.sources[0].endOffset if progress.sources else None,
        )


def stats_frame(df: DataFrame, by: str = "topic") -> DataFrame:
    """Per-topic (or per topic and queue) figures; latency is store minus born time in ms."""
    from pyspark.sql import functions as sf

    if by not in STATS_GROUPINGS:
        raise ValueError(f"by must be one of {', '.join(STATS_GROUPINGS)}, not {by!r}")
    latency = (sf.unix_micros("store_timestamp") - sf.unix_micros("born_timestamp")) / 1000.0
    return (
        df.groupBy(*STATS_GROUPINGS[by])
        .agg(
            sf.count(sf.lit(1)).alias("messages"),
            sf.sum("size").alias("bytes"),
            sf.min("store_timestamp").alias("first_store_time"),
            sf.max("store_timestamp").alias("last_store_time"),
            sf.countDistinct("queue_id").alias("queues"),
            sf.sum(sf.when(sf.col("crc_ok"), 0).otherwise(1)).alias("crc_failures"),
            sf.percentile(latency, sf.lit(0.5)).alias("latency_p50_ms"),
            sf.percentile(latency, sf.lit(0.99)).alias("latency_p99_ms"),
        )
        .orderBy(*STATS_GROUPINGS[by])
    )


def stats(spark: SparkSession, store_dir: str, by: str = "topic") -> list[dict[str, Any]]:
    """`stats_frame` over the whole store, collected as one dict per group."""
    options = {"includeBody": "false"}
    return [
        row.asDict() for row in stats_frame(read_store(spark, store_dir, options), by).collect()
    ]
