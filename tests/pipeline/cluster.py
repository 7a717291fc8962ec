"""A Spark standalone cluster on 127.0.0.1 for the tests: Spark's own Master and Worker classes
from the pyspark install, one worker with one core, started as processes of their own.

`Cluster.stop()` ends the master, the worker and everything they started (executors and their
Python workers), by the process ids this module recorded or found under them.
"""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import time
from dataclasses import dataclass

import psutil
import pyspark

SPARK_HOME = pathlib.Path(pyspark.__file__).parent
SPARK_CLASS = str(SPARK_HOME / "bin" / "spark-class")
SPARK_SUBMIT = str(SPARK_HOME / "bin" / "spark-submit")
START_DEADLINE_S = 120


class ClusterStartError(RuntimeError):
    """The master or the worker did not come up; carries the tail of its log."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def base_env(**extra: str) -> dict[str, str]:
    """The environment of every Spark process of a test: bound to 127.0.0.1, small daemons,
    cheap JIT."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    # Short-lived JVMs doing little work: the quick compiler alone and the serial collector cost
    # them less CPU on a small machine (every Spark JVM reads JAVA_TOOL_OPTIONS).
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_DAEMON_MEMORY="256m",
        JAVA_TOOL_OPTIONS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        **extra,
    )
    return env


@dataclass
class Cluster:
    url: str
    work_dir: pathlib.Path
    processes: list[subprocess.Popen[bytes]]

    def stop(self) -> None:
        """SIGTERM to the daemons and all their descendants, SIGKILL to what is left after 20 s."""
        found: list[psutil.Process] = []
        for proc in self.processes:
            try:
                parent = psutil.Process(proc.pid)
                found += [parent, *parent.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
        for each in found:
            try:
                each.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                continue
        _, alive = psutil.wait_procs(found, timeout=20)
        for each in alive:
            try:
                each.kill()
            except psutil.NoSuchProcess:
                continue
        for proc in self.processes:
            proc.wait(timeout=10)


def start(root: pathlib.Path, worker_env: dict[str, str]) -> Cluster:
    """A master, then one worker (1 core, 1 GiB for executors) registered with it."""
    root.mkdir(parents=True, exist_ok=True)
    port, work_dir = free_port(), root / "work"
    url = f"spark://127.0.0.1:{port}"
    processes: list[subprocess.Popen[bytes]] = []
    cluster = Cluster(url, work_dir, processes)
    try:
        master_log = root / "master.log"
        master = _daemon(
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)],
            ["--webui-port", str(free_port())],
            master_log,
            base_env(),
        )
        processes.append(master)
        _wait_for(master, master_log, "I have been elected leader")
        worker_log = root / "worker.log"
        worker = _daemon(
            ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1"],
            ["--memory", "1g", "--work-dir", str(work_dir), "--webui-port", str(free_port()), url],
            worker_log,
            {**worker_env, "SPARK_LOCAL_DIRS": str(root / "local")},  # executors' scratch
        )
        processes.append(worker)
        _wait_for(worker, worker_log, "Successfully registered with master")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _daemon(
    args: list[str], more: list[str], log: pathlib.Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [SPARK_CLASS, *args, *more],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )


def _wait_for(proc: subprocess.Popen[bytes], log: pathlib.Path, line: str) -> None:
    deadline = time.monotonic() + START_DEADLINE_S
    while line not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:]
            raise ClusterStartError(f"no {line!r} from {proc.args!r}:\n{tail}")
        time.sleep(0.2)
