"""Fixtures of the pipeline tests: one local Spark session for the whole run, stores written by
the real `DefaultMessageStore` with small segments.

The session never calls `spark.dataSource.register`: `format("commitlog")` resolves through the
`pyspark_commitlog` discovery shim, which Spark looks up once per JVM. Every Spark test therefore
also checks discovery in a fresh session.
"""

from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local[2] session shared by every Spark test (startup costs 6-15 s)."""
    from pyspark.sql import SparkSession

    # Spark finds `pyspark_*` modules with pkgutil.iter_modules over sys.path, which does not see
    # an editable install's import hook: put the project root on the workers' path.
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("rmq-broker-pipeline-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
