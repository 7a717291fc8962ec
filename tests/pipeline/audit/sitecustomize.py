"""Imported at start-up by every Python that has this folder on its path (the cluster test puts
it on the driver's and the executors' PYTHONPATH): records each open of a file under
$PIPELINE_AUDIT_WATCH_DIR as one JSON line in $PIPELINE_AUDIT_OPEN_LOG, with who opened it.

`role` is "executor" when a Spark executor JVM (CoarseGrainedExecutorBackend) is an ancestor of
the opening process, "driver" when a driver JVM (SparkSubmit) is, else "other". `pipeline` is
where the opening process imported the pipeline package from; `loaded` lists the third-party
modules that the executor side must not need and that were imported all the same.
"""

from __future__ import annotations

import json
import os
import sys

_LOG = os.environ.get("PIPELINE_AUDIT_OPEN_LOG")
_WATCH = os.environ.get("PIPELINE_AUDIT_WATCH_DIR")
_UNWANTED = ("structlog", "msgpack")


def _role() -> str:
    pid = os.getpid()
    for _ in range(64):
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as cmd:
                cmdline = cmd.read()
        except OSError:
            return "other"
        if b"CoarseGrainedExecutorBackend" in cmdline:
            return "executor"
        if b"org.apache.spark.deploy.SparkSubmit" in cmdline:
            return "driver"
        pid = int(fields[1])
        if pid <= 1:
            return "other"
    return "other"


def _hook(event: str, args: tuple[object, ...]) -> None:
    if event != "open" or not args:
        return
    path = args[0]
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str) or _WATCH is None or not path.startswith(_WATCH):
        return
    pipeline = sys.modules.get("pipeline")
    line = {
        "pid": os.getpid(),
        "role": _role(),
        "path": path,
        "pipeline": getattr(pipeline, "__file__", None),
        "loaded": [name for name in _UNWANTED if name in sys.modules],
        "via_archive": os.environ.get("PIPELINE_AUDIT_VIA_ARCHIVE") == "1",
    }
    assert _LOG is not None
    with open(_LOG, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


if _LOG and _WATCH:
    sys.addaudithook(_hook)
