"""The spark-submit job of the cluster test: stats, export and the streaming export, on a session
from `build_session` with no master given (spark-defaults.conf has it) and no shipping of its own
(the executors get the package from --py-files). Prints one JSON line: the master and the stats.

Arguments: STORE EXPORT_OUT STREAM_OUT CHECKPOINT.
"""

from __future__ import annotations

import json
import sys

from pipeline import jobs
from pipeline.session import build_session


def main(store: str, export_out: str, stream_out: str, checkpoint: str) -> None:
    spark = build_session("rmq-cluster-test", ship_package=False)
    try:
        result = {"master": spark.sparkContext.master, "stats": jobs.stats(spark, store)}
        jobs.export(spark, store, export_out)
        jobs.run_stream(spark, store, jobs.StreamSettings(stream_out, checkpoint, True))
    finally:
        spark.stop()
    print(json.dumps(result, default=str))  # the job's output, read by the test


if __name__ == "__main__":
    main(*sys.argv[1:5])
