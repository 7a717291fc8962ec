"""What executors get: the zip of `rmq-broker pipeline package`, what reading needs of their
Python, and which interpreter runs it (`pipeline.session.executor_python`).

The zip is checked the way an executor uses it: a fresh interpreter whose only view of this
project is the zip (no editable install, no source tree on its path), with structlog and msgpack
made unimportable, unpickles a planned batch reader and reads every split of a real store.
"""

from __future__ import annotations

import pathlib
import pickle
import subprocess
import sys
import sysconfig
import tomllib
import zipfile

from click.testing import CliRunner
from pyspark import SparkConf

from broker.cli_pipeline import pipeline
from pipeline import options, package
from pipeline.session import EXECUTOR_PYTHON_KEY, executor_python, wheels_in
from pipeline.source import CommitLogBatchReader
from tests.pipeline import stores

ROOT = pathlib.Path(__file__).resolve().parents[2]

EXECUTOR = """
import pickle, sys
sys.modules["structlog"] = None  # importing either now fails
sys.modules["msgpack"] = None
sys.path[:0] = [sys.argv[1]]
reader = pickle.loads(open(sys.argv[2], "rb").read())
rows = [sum(b.num_rows for b in reader.read(split)) for split in reader.partitions()]
import pipeline
print(sum(rows), len(rows), pipeline.__file__)
"""


def test_package_writes_the_zip_and_the_executor_requirements(tmp_path: pathlib.Path) -> None:
    result = CliRunner().invoke(pipeline, ["package", "--out", str(tmp_path / "dist")])
    assert result.exit_code == 0, result.output
    zip_path = tmp_path / "dist" / package.ZIP_NAME
    assert f"--py-files {zip_path}" in result.output
    names = zipfile.ZipFile(zip_path).namelist()
    sources = {
        p.relative_to(ROOT).as_posix()
        for folder in ("pipeline", "store")
        for p in (ROOT / folder).rglob("*.py")
    }
    assert set(names) == sources | {"pyspark_commitlog.py"}
    requirements = (tmp_path / "dist" / package.REQUIREMENTS_NAME).read_text().split()
    with (ROOT / "pyproject.toml").open("rb") as handle:
        spark_extra = tomllib.load(handle)["project"]["optional-dependencies"]["spark"]
    # the extra less pyspark, which executors have from the cluster's Spark
    assert requirements == [r for r in spark_extra if not r.startswith("pyspark")]
    package.write_zip(str(tmp_path / "again.zip"))
    assert (tmp_path / "again.zip").read_bytes() == zip_path.read_bytes()


def test_an_executor_reads_from_the_zip_alone_without_structlog_or_msgpack(
    tmp_path: pathlib.Path,
) -> None:
    root = str(tmp_path / "store")
    puts = stores.write_mixed_sync(root, 120)
    opts = options.SourceOptions.parse({"path": root, "splitBytes": "20000"})
    reader = CommitLogBatchReader(opts)  # planned here, as on the driver
    assert len(reader.partitions()) > 4  # splits cut inside segments too
    (tmp_path / "reader.pickle").write_bytes(pickle.dumps(reader))
    zip_path = tmp_path / "rmq_pipeline.zip"
    package.write_zip(str(zip_path))
    site_packages = sysconfig.get_paths()["purelib"]
    program = f"import sys; sys.path.append({site_packages!r})\n{EXECUTOR}"
    done = subprocess.run(
        # -S: no site, so no .pth files and no editable-install hook; -I: no PYTHONPATH, and
        # not the working directory on the path
        [sys.executable, "-I", "-S", "-c", program, str(zip_path), str(tmp_path / "reader.pickle")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows, splits, origin = done.stdout.split()
    assert (int(rows), int(splits)) == (len(puts), len(reader.partitions()))
    assert origin == str(zip_path / "pipeline" / "__init__.py")


def conf(**values: str) -> SparkConf:
    return SparkConf(loadDefaults=False).setAll(
        [(k.replace("_", "."), v) for k, v in values.items()]
    )


def test_the_sql_setting_wins_then_spark_pyspark_python_then_the_variable() -> None:
    sql = EXECUTOR_PYTHON_KEY
    assert executor_python({sql: "/a", "spark.pyspark.python": "/b"}, conf(), "/c") == "/a"
    assert executor_python({}, conf(spark_sql_execution_pyspark_python="/a"), "/c") == "/a"
    assert executor_python({"spark.pyspark.python": "./venv/bin/python"}, conf(), None) == (
        "./venv/bin/python"
    )
    assert executor_python({}, conf(spark_pyspark_python="/b"), "/c") == "/b"
    # spark-submit's recipes set PYSPARK_PYTHON for executors: it is kept for them
    assert executor_python({}, conf(), "./venv/bin/python") == "./venv/bin/python"


def test_with_nothing_set_executors_run_the_driver_interpreter_path() -> None:
    assert executor_python({}, conf(), None) == sys.executable
    assert executor_python({}, conf(), "") == sys.executable


def test_wheels_given_to_py_files_are_named() -> None:
    files = "file:/d/rmq_broker-0.1.0-py3-none-any.whl,file:/d/rmq_pipeline.zip,/d/x.WHL"
    assert wheels_in(files) == ["file:/d/rmq_broker-0.1.0-py3-none-any.whl", "/d/x.WHL"]
    assert wheels_in("") == []
