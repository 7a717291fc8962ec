"""`rmq-broker pipeline ...`: the Spark jobs over a store directory, from the command line.

Owns flags and output only; the jobs live in `pipeline.jobs`. Spark is imported when a command
runs, never when the CLI loads, and a missing Java or store is one line on stderr.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

F = TypeVar("F", bound=Callable[..., Any])


def _common(func: F) -> F:
    func = click.option(
        "--master", default=None, help="Spark master URL (default local[*], or spark-submit's)."
    )(func)
    return click.option(
        "--store-dir",
        required=True,
        type=click.Path(file_okay=False),
        help="Broker store directory (holds commitlog/); must be readable by every executor.",
    )(func)


@contextmanager
def _spark(app_name: str, master: str | None) -> Iterator[SparkSession]:
    """A session for one command; one that was already running (embedding) is left running."""
    from pipeline.session import JavaNotFoundError, build_session, running_session

    existing = running_session()
    try:
        spark = build_session(app_name, master=master)
    except JavaNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        yield spark
    finally:
        if existing is None:
            spark.stop()


def _store(store_dir: str) -> str:
    from pipeline.jobs import StoreNotFoundError, resolve_store

    try:
        return resolve_store(store_dir)
    except StoreNotFoundError as exc:
        raise click.ClickException(str(exc)) from None


@click.group("pipeline")
def pipeline() -> None:
    """Spark jobs over a commit-log store (needs pyspark, pyarrow and Java 17+)."""
    from broker.logging import configure_logging

    # Events go to stderr: stdout carries only the commands' output (`stats --json` is JSON).
    configure_logging()


@pipeline.command("export")
@_common
@click.option("--out", required=True, type=click.Path(), help="Parquet output directory.")
@click.option("--overwrite", is_flag=True, help="Replace an existing output directory.")
@click.option("--topics", default=None, help="Comma-separated topics to keep (default all).")
def export_command(
    store_dir: str, master: str | None, out: str, overwrite: bool, topics: str | None
) -> None:
    """Write every message up to the durable offset as Parquet."""
    from pipeline.jobs import export

    store = _store(store_dir)
    options = {"topics": topics} if topics else {}
    with _spark("rmq-broker-export", master) as spark:
        export(spark, store, out, options, mode="overwrite" if overwrite else "errorifexists")
    click.echo(f"exported {store} to {out}")


@pipeline.command("stream")
@_common
@click.option("--out", required=True, type=click.Path(), help="Parquet output directory.")
@click.option("--checkpoint", required=True, type=click.Path(), help="Checkpoint directory.")
@click.option("--available-now", is_flag=True, help="Process what is there now, then stop.")
@click.option("--trigger", default="5 seconds", show_default=True, help="Micro-batch interval.")
@click.option("--max-bytes-per-trigger", type=click.IntRange(min=1), default=None)
def stream_command(
    *,
    store_dir: str,
    master: str | None,
    out: str,
    checkpoint: str,
    available_now: bool,
    trigger: str,
    max_bytes_per_trigger: int | None,
) -> None:
    """Export continuously to Parquet, exactly once across restarts (same --checkpoint)."""
    from pipeline.jobs import StreamSettings, run_stream

    store = _store(store_dir)
    settings = StreamSettings(out, checkpoint, available_now, trigger, max_bytes_per_trigger)
    with _spark("rmq-broker-stream", master) as spark:
        try:
            run_stream(spark, store, settings)
        except KeyboardInterrupt:
            click.echo("stopped; restart with the same --checkpoint to continue", err=True)


@pipeline.command("stats")
@_common
@click.option(
    "--by", type=click.Choice(["topic", "topic,queue"]), default="topic", show_default=True
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per group.")
def stats_command(store_dir: str, master: str | None, by: str, as_json: bool) -> None:
    """Messages, bytes, first/last store time, queues, CRC failures, store-born latency."""
    from pipeline.jobs import stats

    store = _store(store_dir)
    with _spark("rmq-broker-stats", master) as spark:
        rows = stats(spark, store, by)
    for row in rows:
        click.echo(json.dumps(row, default=_json_value) if as_json else _line(row))


def _json_value(value: object) -> object:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _line(row: dict[str, Any]) -> str:
    return " ".join(
        f"{key}={_json_value(value) if isinstance(value, dt.datetime) else value}"
        for key, value in row.items()
    )
