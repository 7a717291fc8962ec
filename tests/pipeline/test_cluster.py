"""The pipeline on a real standalone cluster (a master and one 1-core worker on 127.0.0.1).

One pass, shared by the tests below, does what the README's cluster section says:
1. `rmq-broker pipeline stream --available-now --master spark://...` with no Python settings: the
   CLI ships the package itself and executors run the driver's interpreter path;
2. more messages are written;
3. `spark-submit` with the master from spark-defaults.conf (no --master), the zip of
   `rmq-broker pipeline package` in --py-files, and executors on `./venv/bin/python` from
   --archives (a stand-in that runs this interpreter and marks its processes); the job runs
   stats, export and the streaming export again on the same checkpoint.
Every Python involved records its opens of store files (tests/pipeline/audit), so the tests can
tell which process read the segments, and what it had imported.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from broker.cli_pipeline import pipeline
from pipeline import package
from store.reader import CommitLogReader
from tests.pipeline import cluster, stores

pytestmark = pytest.mark.timeout(900)

ROOT = pathlib.Path(__file__).resolve().parents[2]
AUDIT = pathlib.Path(__file__).parent / "audit"
JOB = pathlib.Path(__file__).parent / "cluster_job.py"
RUN_TIMEOUT_S = 400
FIRST, MORE = 300, 200


@dataclass
class Pass:
    store: pathlib.Path
    stream_out: pathlib.Path
    export_out: pathlib.Path
    offsets_before: list[int]
    offsets_after: list[int]
    cli: subprocess.CompletedProcess[str]
    job: dict[str, Any]
    opens: list[dict[str, Any]]
    seconds: dict[str, float]


def run(
    args: list[str], env: dict[str, str], cwd: pathlib.Path
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, env=env, cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    (cwd / f"{pathlib.Path(args[0]).name}-{len(list(cwd.glob('*.stderr')))}.stderr").write_text(
        done.stderr
    )  # kept beside the run's files, for a look after a failure
    assert done.returncode == 0, f"{args[:4]} failed:\n{done.stderr[-4000:]}"
    return done


def offsets(store: pathlib.Path) -> list[int]:
    with CommitLogReader(str(store)) as reader:
        return [rec.physical_offset for rec in reader.iter_records(reader.min_offset)]


def parquet_offsets(folder: pathlib.Path) -> list[int]:
    return sorted(pq.read_table(folder, columns=["physical_offset"]).column(0).to_pylist())


def archive_python(path: pathlib.Path) -> None:
    """A venv.tar.gz stand-in: bin/python marks its process, then runs this interpreter."""
    script = f'#!/bin/sh\nPIPELINE_AUDIT_VIA_ARCHIVE=1 exec {sys.executable} "$@"\n'.encode()
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("bin/python")
        info.size, info.mode = len(script), 0o755
        tar.addfile(info, io.BytesIO(script))


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pass]:
    root = tmp_path_factory.mktemp("cluster")
    store, opens_log = root / "store", root / "opens.jsonl"
    stores.append_sync(str(store), [stores.message(i) for i in range(FIRST)])
    audit = {"PIPELINE_AUDIT_OPEN_LOG": str(opens_log), "PIPELINE_AUDIT_WATCH_DIR": str(store)}
    # Executors see only the audit hook on their path: the package must come from what is shipped.
    spark = cluster.start(root / "spark", cluster.base_env(PYTHONPATH=str(AUDIT), **audit))
    try:
        yield _one_pass(root, store, spark.url, audit, opens_log)
    finally:
        spark.stop()


def _one_pass(
    root: pathlib.Path,
    store: pathlib.Path,
    url: str,
    audit: dict[str, str],
    opens_log: pathlib.Path,
) -> Pass:
    driver_path = os.pathsep.join([str(ROOT), str(AUDIT)])
    stream_out, checkpoint, export_out = root / "stream", root / "ck", root / "export"
    seconds: dict[str, float] = {}
    started = time.monotonic()
    cli = run(
        [
            *(sys.executable, "-m", "broker", "pipeline", "stream", "--store-dir", str(store)),
            *("--out", str(stream_out), "--checkpoint", str(checkpoint), "--available-now"),
            *("--master", url),
        ],
        cluster.base_env(PYTHONPATH=driver_path, **audit),
        root,
    )
    seconds["cli_stream"] = time.monotonic() - started
    before = offsets(store)
    stores.append_sync(str(store), [stores.message(FIRST + i) for i in range(MORE)])

    dist, conf = root / "dist", root / "conf"
    packaged = CliRunner().invoke(pipeline, ["package", "--out", str(dist)])
    assert packaged.exit_code == 0, packaged.output
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(f"spark.master {url}\nspark.ui.enabled false\n")
    archive_python(root / "venv.tar.gz")
    env = cluster.base_env(
        PYTHONPATH=driver_path,
        SPARK_CONF_DIR=str(conf),
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYSPARK_PYTHON="./venv/bin/python",
        **audit,
    )
    started = time.monotonic()
    submitted = run(
        [
            *(cluster.SPARK_SUBMIT, "--py-files", str(dist / "rmq_pipeline.zip")),
            *("--archives", f"{root / 'venv.tar.gz'}#venv", str(JOB)),
            *(str(store), str(export_out), str(stream_out), str(checkpoint)),
        ],
        env,
        root,
    )
    seconds["spark_submit_job"] = time.monotonic() - started
    job = json.loads(submitted.stdout.strip().splitlines()[-1])
    opens = [json.loads(line) for line in opens_log.read_text().splitlines()]
    print(f"cluster pass: {seconds}")  # the cost, for the suite's budget
    return Pass(store, stream_out, export_out, before, offsets(store), cli, job, opens, seconds)


def test_streaming_export_on_the_cluster_is_exact_across_two_runs(done: Pass) -> None:
    assert len(done.offsets_before) == FIRST
    assert len(done.offsets_after) == FIRST + MORE
    exported = parquet_offsets(done.stream_out)
    assert len(exported) == len(set(exported)), "a message was exported twice"
    assert exported == done.offsets_after


def test_stats_and_export_on_the_cluster_are_exact(done: Pass) -> None:
    assert done.job["master"].startswith("spark://127.0.0.1:")
    by_topic = {row["topic"]: row["messages"] for row in done.job["stats"]}
    with CommitLogReader(str(done.store)) as reader:
        topics = [rec.topic for rec in reader.iter_records(reader.min_offset)]
    assert by_topic == {topic: topics.count(topic) for topic in set(topics)}
    assert sum(row["crc_failures"] for row in done.job["stats"]) == 0
    assert parquet_offsets(done.export_out) == done.offsets_after


def test_the_cli_names_the_cluster_and_both_pythons(done: Pass) -> None:
    events = [json.loads(line) for line in done.cli.stderr.splitlines() if line.startswith("{")]
    started = [e for e in events if e["event"] == "spark_session_started"]
    assert len(started) == 1
    assert started[0]["master"].startswith("spark://127.0.0.1:")
    assert started[0]["driver_python"] == started[0]["executor_python"] == sys.executable
    assert started[0]["shipped"].endswith(package.SHIPPED_NAME)
    assert started[0]["progress"] is False


def test_executors_not_the_driver_read_every_segment(done: Pass) -> None:
    segments = {str(p) for p in (done.store / "commitlog").iterdir()}
    segment_opens = [o for o in done.opens if o["path"] in segments]
    assert {o["role"] for o in segment_opens} == {"executor"}
    # each run's executors read every segment that held its messages, from the shipped zip
    first_run = {o["path"] for o in segment_opens if not o["via_archive"]}
    second_run = {o["path"] for o in segment_opens if o["via_archive"]}
    assert second_run == segments
    assert first_run and first_run <= segments
    # the driver side was watched too: its planning opened the store's flush offset
    assert "driver" in {o["role"] for o in done.opens if o["path"].endswith("flushoffset")}


def test_executors_import_the_shipped_zip_and_no_structlog_or_msgpack(done: Pass) -> None:
    executor = [o for o in done.opens if o["role"] == "executor"]
    assert executor
    for opened in executor:
        # the second run's job ships nothing itself: its executors use the --py-files zip
        shipped = package.ZIP_NAME if opened["via_archive"] else package.SHIPPED_NAME
        assert opened["pipeline"].endswith(os.path.join(shipped, "pipeline", "__init__.py"))
        assert opened["loaded"] == []
