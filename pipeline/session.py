"""Starting Spark for the pipeline jobs: the Java check, the session, source registration.

Owns how a job gets a `SparkSession`. A missing Java is reported as one line
(`JavaNotFoundError`) before Spark is touched, since Spark's own failure is a long stack trace.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import TYPE_CHECKING, Final

import structlog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger()

DEFAULT_MASTER: Final = "local[*]"


class JavaNotFoundError(RuntimeError):
    """No Java runtime for Spark: neither $JAVA_HOME/bin/java nor `java` on PATH."""


def find_java(environ: dict[str, str] | None = None) -> str:
    """The java executable Spark will launch; raises JavaNotFoundError with a one-line hint."""
    env = dict(os.environ) if environ is None else environ
    java_home = env.get("JAVA_HOME")
    if java_home:
        candidate = os.path.join(java_home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
        raise JavaNotFoundError(
            f"JAVA_HOME={java_home} has no bin/java; Spark needs Java 17 or newer"
        )
    found = shutil.which("java", path=env.get("PATH", ""))
    if found is None:
        raise JavaNotFoundError(
            "java not found: install Java 17+ or set JAVA_HOME (Spark runs on the JVM)"
        )
    return found


def build_session(
    app_name: str,
    master: str | None = None,
    conf: dict[str, str] | None = None,
    show_progress: bool = True,
) -> SparkSession:
    """Start (or join) a Spark session with the `commitlog` source registered.

    `master` is applied only when given or when nothing (spark-submit, spark-defaults) set one, so
    `spark-submit --master ...` keeps working. Raises JavaNotFoundError before starting the JVM.
    """
    find_java()
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    configured = SparkConf()
    effective = master or configured.get("spark.master", DEFAULT_MASTER)
    if master is not None or not configured.contains("spark.master"):
        builder = builder.master(effective)
    builder = builder.config("spark.ui.showConsoleProgress", str(show_progress).lower())
    if effective.startswith("local") and not configured.contains("spark.pyspark.python"):
        # Local workers must run this interpreter (it has pyarrow). The JVM reads the variable
        # when it starts Python workers (the data source planner ignores spark.pyspark.python);
        # on a cluster, configure the nodes' interpreter instead.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    log.info("spark_session_started", master=spark.sparkContext.master, app=app_name)
    return spark


def running_session() -> SparkSession | None:
    """The session already active in this process, if any (without starting Spark)."""
    if "pyspark.sql" not in sys.modules:
        return None
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def register(spark: SparkSession) -> None:
    """Register the source explicitly (discovery via `pyspark_commitlog` needs it on sys.path)."""
    from pipeline.source import CommitLogDataSource

    spark.dataSource.register(CommitLogDataSource)
