"""The jobs and `rmq-broker pipeline`: stats against the store's own reader, export, CLI errors."""

from __future__ import annotations

import collections
import json
import pathlib
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import click
import numpy as np
import pytest
from click.testing import CliRunner

from broker.cli_pipeline import pipeline
from pipeline import jobs
from pipeline.session import JavaNotFoundError, find_java
from store.reader import CommitLogReader
from tests.pipeline import stores

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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


def test_cli_stats_json_stdout_is_only_json_and_a_new_store_has_no_rows(
    store_dir: str, tmp_path: pathlib.Path
) -> None:
    new_store = str(tmp_path / "new")
    stores.append_sync(new_store, [])
    for root, topics in ((store_dir, set(expected_stats(store_dir))), (new_store, set())):
        done = subprocess.run(
            [sys.executable, "-m", "broker", "pipeline", "stats", "--store-dir", root, "--json"],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert {json.loads(line)["topic"] for line in done.stdout.splitlines()} == topics
        assert "spark_session_started" in done.stderr
