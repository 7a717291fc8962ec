"""`rmq-broker pipeline ...`: the Spark jobs over a store directory, from the command line.

Owns flags and output only; the jobs live in `pipeline.jobs`. Spark is imported when a command
runs, never when the CLI loads, and a missing Java or store is one line on stderr.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO, TypeVar, cast

import click

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

F = TypeVar("F", bound=Callable[..., Any])
#: how a Python worker's import failure reads inside Spark's error text
MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


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
        # Spark's progress bar redraws one line with carriage returns: only for a person at a
        # terminal. Logs are JSON lines exactly when stderr is not one (broker.logging).
        spark = build_session(app_name, master=master, show_progress=sys.stderr.isatty())
    except JavaNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        yield spark
    except Exception as exc:
        missing = MISSING_MODULE.search(str(exc))
        if missing is None:
            raise
        raise click.ClickException(_missing_module(spark, missing.group(1))) from None
    finally:
        if existing is None:
            spark.stop()


def _missing_module(spark: SparkSession, module: str) -> str:
    """One line for a Python worker that could not import what the source needs."""
    from pipeline.package import EXECUTOR_REQUIREMENTS
    from pipeline.session import EXECUTOR_PYTHON_KEY

    executors = spark.conf.get(EXECUTOR_PYTHON_KEY, None) or "python3"
    return (
        f"a Spark Python worker cannot import {module!r}: executors run {executors}, the "
        f"driver's planning runs {sys.executable}; install {' '.join(EXECUTOR_REQUIREMENTS)} "
        "for the executors' interpreter on every node, or point spark.pyspark.python at one "
        "that has them"
    )


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
    # On a terminal each event first clears the line Spark's progress bar may be drawing on.
    terminal = sys.stderr.isatty()
    configure_logging(stream=cast(TextIO, BarClearingStream(sys.stderr)) if terminal else None)


class BarClearingStream:
    """A terminal stream whose lines start by erasing what is on the current line (a progress
    bar drawn with carriage returns), so that a log event never shares its line."""

    CLEAR_LINE = "\r\x1b[2K"

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.at_line_start = True

    def write(self, text: str) -> int:
        if text and self.at_line_start:
            self.out.write(self.CLEAR_LINE)
        if text:
            self.at_line_start = text.endswith("\n")
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()

    def isatty(self) -> bool:
        return self.out.isatty()


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


@pipeline.command("package")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory to write rmq_pipeline.zip and executor-requirements.txt into.",
)
def package_command(out_dir: str) -> None:
    """Write the zip for spark-submit --py-files and the executors' pip requirements."""
    from pipeline.package import EXECUTOR_REQUIREMENTS, PackageSourceError, write_bundle

    try:
        zip_path, requirements = write_bundle(out_dir)
    except (PackageSourceError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {zip_path} (spark-submit --py-files {zip_path})")
    click.echo(
        f"wrote {requirements}: every executor's Python needs {' '.join(EXECUTOR_REQUIREMENTS)}"
    )


def _json_value(value: object) -> object:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _line(row: dict[str, Any]) -> str:
    return " ".join(
        f"{key}={_json_value(value) if isinstance(value, dt.datetime) else value}"
        for key, value in row.items()
    )
