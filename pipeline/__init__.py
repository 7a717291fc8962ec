"""PySpark data source and jobs over the commit-log store."""

from pipeline.shadowing import use_project_packages

# Spark's Python workers run with their working directory first on sys.path: a folder named
# `store` there must not stand in for the store package (see pipeline.shadowing).
use_project_packages()
