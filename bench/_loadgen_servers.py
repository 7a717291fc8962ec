"""The servers under load: our broker, Redis 7 and the minimal Trio server (bench/minimal_server.py)
as subprocesses, and their memory footprint.

Each server gets a free loopback port and a fresh directory on the disk the bench runs from, is
started for one flush mode, and is stopped (SIGTERM, then SIGKILL after a deadline) when its rows
are done. Memory is read with psutil: `rss` is what `ps` shows, and `anon` leaves out file-backed
pages, so the broker's mmap'ed commit log (page cache) does not count as its own memory. The
broker also serves /metrics on a free port, where the bench reads its flush count.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

import psutil
from prometheus_client.parser import text_string_to_metric_families

FlushMode = Literal["SYNC", "ASYNC"]
Kind = Literal["broker", "redis", "minimal"]
_MIB: Final = 1024 * 1024
_READY_TIMEOUT_S: Final = 30.0
_STOP_TIMEOUT_S: Final = 20.0
REDIS_SERVER: Final = "redis-server"


@dataclass(slots=True)
class Footprint:
    """Memory of one server process in MiB: after start, and the largest seen under load."""

    idle_rss: float = 0.0
    idle_anon: float = 0.0
    peak_rss: float = 0.0
    peak_anon: float = 0.0


@dataclass(slots=True)
class Server:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    footprint: Footprint = field(default_factory=Footprint)
    #: the broker's /metrics port (None for the others)
    metrics_port: int | None = None

    def flushes_and_puts(self) -> tuple[float, float] | None:
        """The broker's commit-log flushes and stored messages so far, from its /metrics."""
        if self.metrics_port is None:
            return None
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read().decode()
        except OSError:
            return None
        flushes = puts = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "rmq_broker_flush_latency_seconds_count":
                    flushes += sample.value
                elif sample.name == "rmq_broker_put_messages_total":
                    puts += sample.value
        return flushes, puts

    def sample_memory(self) -> None:
        """Fold the current RSS into the peaks; a vanished process is left to the caller."""
        try:
            info = psutil.Process(self.process.pid).memory_info()
        except psutil.Error:
            return
        anon = (info.rss - info.shared) / _MIB
        self.footprint.peak_rss = max(self.footprint.peak_rss, info.rss / _MIB)
        self.footprint.peak_anon = max(self.footprint.peak_anon, anon)

    def cpu_seconds(self) -> float:
        """User + system CPU time the server has used so far, all its threads."""
        times = psutil.Process(self.process.pid).cpu_times()
        return float(times.user + times.system)

    def record_idle(self) -> None:
        info = psutil.Process(self.process.pid).memory_info()
        self.footprint.idle_rss = info.rss / _MIB
        self.footprint.idle_anon = (info.rss - info.shared) / _MIB


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel had free a moment ago (the server binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def redis_available() -> bool:
    return shutil.which(REDIS_SERVER) is not None


#: the console script installed beside the interpreter running the bench
BROKER_EXECUTABLE: Final = Path(sys.executable).with_name("rmq-broker")
MINIMAL_SERVER: Final = Path(__file__).resolve().with_name("minimal_server.py")


def _broker_command(executable: Path, port: int, store_dir: Path, mode: FlushMode) -> list[str]:
    return [
        str(executable),
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--store-dir",
        str(store_dir),
        "--flush-disk-type",
        f"{mode}_FLUSH",
    ]


def _redis_command(port: int, data_dir: Path, mode: FlushMode) -> list[str]:
    return [
        REDIS_SERVER,
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--dir", str(data_dir),
        "--save", "",
        "--appendonly", "yes",
        "--appendfsync", "always" if mode == "SYNC" else "everysec",
        "--protected-mode", "no",
        "--daemonize", "no",
        "--loglevel", "warning",
    ]  # fmt: skip


def _minimal_command(port: int) -> list[str]:
    """The minimal server has no store and no flush: the same command for both modes."""
    return [sys.executable, str(MINIMAL_SERVER), "--listen", f"127.0.0.1:{port}"]


def _wait_ready(server: Server, log: Path) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{server.name} exited with {server.process.returncode}:\n{tail}")
        try:
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
        except OSError:
            time.sleep(0.05)
            continue
        time.sleep(0.3)  # let the accept loop and background services settle before "idle"
        return
    raise RuntimeError(f"{server.name} did not listen on {server.port} in {_READY_TIMEOUT_S}s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def running(
    kind: Kind,
    mode: FlushMode,
    root: Path,
    broker_executable: Path = BROKER_EXECUTABLE,
    *,
    extra_env: Mapping[str, str] | None = None,
    name: str | None = None,
) -> Iterator[Server]:
    """Start a fresh `kind` server for `mode` under `root`; stop it and remove its files after.
    `extra_env` adds to its environment (a broker's `RMQ_*` settings); `name` tells the server
    apart from others of its kind (its log file's name).

    Raises RuntimeError if it exits or does not listen within 30 s (its log tail included).
    """
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"send-{kind}-{mode.lower()}-", dir=root))
    port = free_port()
    env = {**os.environ, **(extra_env or {})}
    metrics_port = None
    if kind == "broker":
        command = _broker_command(broker_executable, port, work / "store", mode)
        metrics_port = free_port()
        env["RMQ_METRICS_LISTEN"] = f"127.0.0.1:{metrics_port}"
        # the remoting port is the one measured: no gRPC endpoint on 8081 (another broker on the
        # machine may hold it), an HA port of the system's choosing (not the listen port + 1)
        env.setdefault("RMQ_GRPC_LISTEN", "none")
        env.setdefault("RMQ_HA_LISTEN_PORT", "0")
    elif kind == "redis":
        command = _redis_command(port, work, mode)
    else:
        command = _minimal_command(port)
    log = work / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    server = Server(name or f"{kind} {mode}", port, process, metrics_port=metrics_port)
    try:
        _wait_ready(server, log)
        server.record_idle()
        yield server
    finally:
        _stop(process)
        # keep the server's log beside the results; its files go (they can be gigabytes)
        shutil.copyfile(log, root / f"{name or kind}-{mode.lower()}.log")
        shutil.rmtree(work, ignore_errors=True)
