"""Discovery shim: Spark registers `DefaultSource` of any top-level `pyspark_*` module it finds.

With this module on the Python path of the driver (an installed wheel, or the project root on
PYTHONPATH), `spark.read.format("commitlog")` works without `spark.dataSource.register(...)`.
Spark finds it with `pkgutil.iter_modules()`, which scans sys.path entries only: an editable
install through an import hook is not seen, a wheel or a path entry is.
"""

from pipeline.source import CommitLogDataSource as DefaultSource

__all__ = ["DefaultSource"]
