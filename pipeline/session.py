"""Starting Spark for the pipeline jobs: the Java check, the session, source registration.

Owns how a job gets a `SparkSession`: which master (the caller's, else spark-submit's or
spark-defaults.conf's), which Python on the driver and on executors, and shipping this package.
A missing Java is reported as one line (`JavaNotFoundError`) before Spark is touched, since
Spark's own failure is a long stack trace.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from typing import TYPE_CHECKING, Final

import structlog

if TYPE_CHECKING:
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

log = structlog.get_logger()

DEFAULT_MASTER: Final = "local[*]"
#: the interpreter of executors' Python workers that run SQL work (the source's reads among it)
EXECUTOR_PYTHON_KEY: Final = "spark.sql.execution.pyspark.python"


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
    show_progress: bool = False,
    ship_package: bool = True,
) -> SparkSession:
    """Start (or join) a Spark session with the `commitlog` source registered.

    The master is `master` when given, else what spark-submit's `--master` or spark-defaults.conf
    set (read from the JVM, which is started first for that), else `local[*]`. Python workers on
    the driver (the source's planning) run this interpreter; executors run
    `executor_python(...)`. On a cluster this package is shipped to the executors as a zip unless
    `ship_package` is false. Raises JavaNotFoundError before starting the JVM.
    """
    find_java()
    existing = running_session()
    if existing is not None:
        register(existing)
        return existing
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    extra = dict(conf or {})
    requested_python = os.environ.get("PYSPARK_PYTHON")
    # Spark takes the driver-side Python workers' interpreter (the source's planning, and the
    # lookup of `pyspark_*` sources, which reads the JVM's environment) from this variable: it
    # must import this package, and a path meant for executors (./venv/bin/python from
    # --archives) does not exist on the driver. Executors get theirs from the SQL setting.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # The JVM first: its system properties hold spark-submit's flags and spark-defaults.conf.
    # A SparkConf made before it exists is empty and would hide them (private, but stable API).
    SparkContext._ensure_initialized(conf=SparkConf(loadDefaults=False).setAll(list(extra.items())))
    configured = SparkConf()
    effective = master or extra.get("spark.master") or configured.get("spark.master")
    builder = SparkSession.builder.appName(app_name)
    if effective is None or master is not None:
        effective = effective or DEFAULT_MASTER
        builder = builder.master(effective)
    executors = executor_python(extra, configured, requested_python)
    builder = builder.config("spark.ui.showConsoleProgress", str(show_progress).lower())
    builder = builder.config(EXECUTOR_PYTHON_KEY, executors)
    for key, value in extra.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    wheels = wheels_in(spark.sparkContext.getConf().get("spark.submit.pyFiles", "") or "")
    if wheels:
        log.warning(
            "pipeline_wheel_in_py_files",
            wheels=wheels,
            hint="PySpark puts only .zip, .egg and .jar files of --py-files on the Python path; "
            "ship the zip of `rmq-broker pipeline package`",
        )
    shipped = ship(spark) if ship_package and not effective.startswith("local") else None
    register(spark)
    log.info(
        "spark_session_started",
        master=spark.sparkContext.master,
        app=app_name,
        driver_python=sys.executable,
        executor_python=executors,
        shipped=shipped,
        progress=show_progress,
    )
    return spark


def executor_python(extra: dict[str, str], configured: SparkConf, requested: str | None) -> str:
    """The executors' interpreter: the SQL setting, else spark.pyspark.python, else the
    PYSPARK_PYTHON variable as it was (`requested`; spark-submit's recipes set it), else this
    interpreter's path (right wherever the nodes have the same installation)."""
    for key in (EXECUTOR_PYTHON_KEY, "spark.pyspark.python"):
        value = extra.get(key) or configured.get(key)
        if value:
            return value
    return requested or sys.executable


def wheels_in(py_files: str) -> list[str]:
    """The wheels among spark-submit's --py-files (a comma-separated list): PySpark ignores them."""
    return [name for name in py_files.split(",") if name.strip().lower().endswith(".whl")]


def ship(spark: SparkSession) -> str:
    """Zip this package's executor side and add it to every task's Python path; the file lives
    in a temporary directory removed when the process exits."""
    from pipeline.package import SHIPPED_NAME, write_zip

    folder = tempfile.mkdtemp(prefix="rmq-pipeline-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = os.path.join(folder, SHIPPED_NAME)
    write_zip(path)
    spark.sparkContext.addPyFile(path)
    return path


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
