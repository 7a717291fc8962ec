"""PySpark data source and jobs over the commit-log store."""
