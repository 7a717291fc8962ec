"""Which interpreter executors get (`pipeline.session.executor_python`), without starting Spark."""

from __future__ import annotations

import sys

from pyspark import SparkConf

from pipeline.session import EXECUTOR_PYTHON_KEY, executor_python, wheels_in


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
