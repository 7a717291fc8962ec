"""PySpark data source and jobs over the commit-log store."""

from pipeline.package import use_project_packages

# Spark's Python workers run with their working directory first on sys.path: a folder named
# `store` there must not stand in for the store package (see pipeline.package).
use_project_packages()
