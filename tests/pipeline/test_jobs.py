"""The jobs and `rmq-broker pipeline`: stats against the store's own reader, export, CLI errors."""

from __future__ import annotations

import collections
import io
import json
import os
import pathlib
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import click
import numpy as np
import pytest
from click.testing import CliRunner

from broker.cli_pipeline import BarClearingStream, pipeline
from pipeline import jobs
from pipeline.session import EXECUTOR_PYTHON_KEY, JavaNotFoundError, find_java
from store.reader import CommitLogReader
from tests.pipeline import stores

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EDITABLE = pathlib.Path(__file__).parent / "editable"


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = str(tmp_path_factory.mktemp("jobs") / "store")
    stores.write_mixed_sync(root, 200)
    return root


def expected_stats(root: str) -> dict[str, dict[str, Any]]:
    """Per-topic figures computed from the store's own reader, one record at a time."""
    groups: dict[str, list[Any]] = collections.defaultdict(list)
    with CommitLogReader(root) as reader:
        for rec in reader.iter_records(reader.min_offset):
            groups[rec.topic].append(rec)
    out = {}
    for topic, recs in groups.items():
        latency = np.array([r.store_timestamp - r.born_timestamp for r in recs], dtype=float)
        out[topic] = {
            "messages": len(recs),
            "bytes": sum(r.total_size for r in recs),
            "first_ms": min(r.store_timestamp for r in recs),
            "last_ms": max(r.store_timestamp for r in recs),
            "queues": len({r.queue_id for r in recs}),
            "crc_failures": sum(1 for r in recs if not r.crc_ok),
            "p50": float(np.percentile(latency, 50)),
            "p99": float(np.percentile(latency, 99)),
        }
    return out


def test_stats_agree_with_the_store_reader(spark: SparkSession, store_dir: str) -> None:
    expected = expected_stats(store_dir)
    got = {row["topic"]: row for row in jobs.stats(spark, store_dir, by="topic")}
    assert set(got) == set(expected)
    for topic, want in expected.items():
        row = got[topic]
        assert (row["messages"], row["bytes"], row["queues"]) == (
            want["messages"],
            want["bytes"],
            want["queues"],
        )
        assert row["crc_failures"] == want["crc_failures"] == 0
        assert int(row["first_store_time"].timestamp() * 1000) == want["first_ms"]
        assert int(row["last_store_time"].timestamp() * 1000) == want["last_ms"]
        assert row["latency_p50_ms"] == pytest.approx(want["p50"])
        assert row["latency_p99_ms"] == pytest.approx(want["p99"])
    by_queue = jobs.stats(spark, store_dir, by="topic,queue")
    assert sum(row["messages"] for row in by_queue) == sum(w["messages"] for w in expected.values())
    assert all(row["queues"] == 1 for row in by_queue)


def test_export_writes_every_message_as_parquet(
    spark: SparkSession, store_dir: str, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "parquet"
    jobs.export(spark, store_dir, str(out))
    with CommitLogReader(store_dir) as reader:
        offsets = [r.physical_offset for r in reader.iter_records(reader.min_offset)]
    table = spark.read.parquet(str(out)).toArrow().sort_by("physical_offset")
    assert table.column("physical_offset").to_pylist() == offsets
    assert table.column("body").null_count == 0


def test_cli_stats_prints_one_json_object_per_topic(spark: SparkSession, store_dir: str) -> None:
    result = CliRunner().invoke(pipeline, ["stats", "--store-dir", store_dir, "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert {line["topic"]: line["messages"] for line in lines} == {
        topic: want["messages"] for topic, want in expected_stats(store_dir).items()
    }
    assert spark.range(1).count() == 1  # the shared session survived the command


def test_missing_java_is_one_line(store_dir: str, tmp_path: pathlib.Path) -> None:
    with pytest.raises(JavaNotFoundError, match="JAVA_HOME"):
        find_java({"JAVA_HOME": str(tmp_path)})
    with pytest.raises(JavaNotFoundError, match="java not found"):
        find_java({"PATH": str(tmp_path)})
    result = CliRunner().invoke(
        pipeline, ["stats", "--store-dir", store_dir], env={"JAVA_HOME": str(tmp_path)}
    )
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"Error: JAVA_HOME={tmp_path} has no bin/java; Spark needs Java 17 or newer"
    ]


def test_not_a_store_is_one_line(tmp_path: pathlib.Path) -> None:
    result = CliRunner().invoke(pipeline, ["export", "--store-dir", str(tmp_path), "--out", "x"])
    assert result.exit_code == 1
    assert "not a store directory" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert isinstance(pipeline, click.Group)


def test_cli_stats_json_stdout_is_only_json_from_a_folder_holding_a_store_named_store(
    store_dir: str,
) -> None:
    """Run by `python -m broker` (which puts the working directory first on sys.path) from the
    folder holding a store named `store` (with its config/ and index/ folders), with the project
    importable as an editable install makes it (tests/pipeline/editable): the folder must not
    shadow the package, in the CLI or in Spark's Python workers (started with the working
    directory on their path)."""
    store = pathlib.Path(store_dir)
    assert store.name == "store" and (store / "config").is_dir() and (store / "index").is_dir()
    done = subprocess.run(
        [sys.executable, "-m", "broker", "pipeline", "stats", "--store-dir", "store", "--json"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=store.parent,
        env={**os.environ, "PYTHONPATH": str(EDITABLE)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    topics = {json.loads(line)["topic"] for line in done.stdout.splitlines()}
    assert topics == set(expected_stats(store_dir))
    # stderr is not a terminal: JSON events, and no progress bar to share their lines
    events = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    started = [e for e in events if e["event"] == "spark_session_started"]
    assert len(started) == 1 and started[0]["progress"] is False
    assert "[Stage" not in done.stderr


def test_a_new_store_has_no_rows(spark: SparkSession, tmp_path: pathlib.Path) -> None:
    new_store = tmp_path / "store"
    stores.append_sync(str(new_store), [])
    assert (new_store / "config").is_dir() and (new_store / "index").is_dir()
    assert list(jobs.stats(spark, str(new_store), by="topic")) == []


def test_a_worker_python_without_pyarrow_is_one_line_naming_it(
    spark: SparkSession, store_dir: str, tmp_path: pathlib.Path
) -> None:
    """Executors on an interpreter that lacks pyarrow: the CLI says which one and what it needs."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoPyarrow:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'pyarrow':\n"
        "            raise ModuleNotFoundError(\"No module named 'pyarrow'\", name=name)\n"
        "sys.meta_path.insert(0, _NoPyarrow())\n"
    )
    python = tmp_path / "python-without-pyarrow"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={blocker}:$PYTHONPATH exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    spark.conf.set(EXECUTOR_PYTHON_KEY, str(python))
    try:
        result = CliRunner().invoke(pipeline, ["stats", "--store-dir", store_dir])
    finally:
        spark.conf.unset(EXECUTOR_PYTHON_KEY)
    assert result.exit_code == 1, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error: a Spark Python worker cannot import 'pyarrow'")
    assert f"executors run {python}" in line and "pyarrow>=18" in line
    assert spark.range(1).count() == 1


def test_log_lines_on_a_terminal_start_by_clearing_the_progress_bar() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    stream = BarClearingStream(out)
    out.write("[Stage 0:>    (0 + 1) / 4]")  # Spark draws its bar without a newline
    stream.write("event=a")
    stream.write("\n")
    stream.write("event=b\n")
    clear = BarClearingStream.CLEAR_LINE
    assert out.getvalue() == f"[Stage 0:>    (0 + 1) / 4]{clear}event=a\n{clear}event=b\n"
    assert stream.isatty()
