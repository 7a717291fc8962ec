"""A real `rmq-broker serve` in a subprocess, for the tests that drive the daemon."""

from __future__ import annotations

import json
import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Final

BROKER = [sys.executable, "-m", "broker"]


#: the commit-log segment size of a test daemon unless its `env` says otherwise
TEST_DAEMON_SEGMENT_SIZE: Final = 64 << 20


class Daemon:
    """One `rmq-broker serve` subprocess on 127.0.0.1 port 0; `events` holds the JSON log lines
    read so far (dicts). A thread drains stderr all the time: a broker that logs into a full
    pipe would block. `env` adds `RMQ_*` settings; `wait=False` returns before it listens;
    `preexec_fn` runs in the child before the exec (a resource limit)."""

    def __init__(
        self,
        store_dir: pathlib.Path,
        *extra: str,
        env: Mapping[str, str] | None = None,
        wait: bool = True,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        self.store_dir = store_dir
        environ = {
            **os.environ,
            "RMQ_LOG_LEVEL": "info",
            # A small message index: the default one takes 20 MB of disk per store.
            "RMQ_MAX_HASH_SLOT_NUM": "5000",
            "RMQ_MAX_INDEX_NUM": "20000",
            # 64 MiB segments unless the test's environment says otherwise: each default one
            # takes 1 GiB of disk as soon as it is created, and pytest keeps the stores of its
            # last three runs.
            "RMQ_MAPPED_FILE_SIZE_COMMIT_LOG": os.environ.get(
                "RMQ_MAPPED_FILE_SIZE_COMMIT_LOG", str(TEST_DAEMON_SEGMENT_SIZE)
            ),
            **(env or {}),
        }
        self.process = subprocess.Popen(
            [*BROKER, "serve", "--listen", "127.0.0.1:0", "--store-dir", str(store_dir), *extra],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
            preexec_fn=preexec_fn,  # noqa: PLW1509 - tests pass only setrlimit
        )
        self.events: list[dict[str, object]] = []
        self._lines: queue.Queue[dict[str, object] | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.port = int(str(self.wait_for("listening")["port"])) if wait else 0

    def _pump(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict):
                record = {"event": "text", "text": line.rstrip("\n")}
            self._lines.put(record)
        self._lines.put(None)

    def event(self, event: str, timeout_s: float = 60) -> dict[str, object]:
        """The first log record named `event`, already seen or still to come."""
        for record in self.events:
            if record.get("event") == event:
                return record
        return self.wait_for(event, timeout_s)

    def wait_for(self, event: str, timeout_s: float = 60) -> dict[str, object]:
        """The next log record named `event`; AssertionError if the process ends first."""
        while (record := self._lines.get(timeout=timeout_s)) is not None:
            self.events.append(record)
            if record.get("event") == event:
                return record
        raise AssertionError(f"daemon ended before {event!r}: {self.text()}")

    def drain(self) -> None:
        """Move every log line received so far into `events` (never blocks)."""
        while True:
            try:
                record = self._lines.get_nowait()
            except queue.Empty:
                return
            if record is None:
                return
            self.events.append(record)

    def count(self, event: str) -> int:
        self.drain()
        return sum(1 for e in self.events if e.get("event") == event)

    def text(self) -> str:
        return "\n".join(json.dumps(e) for e in self.events[-40:])

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as after a crash."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self.drain()

    def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM and wait for the graceful shutdown; the exit code."""
        if self.process.poll() is None:
            self.process.terminate()
        return self.finish(timeout_s)

    def finish(self, timeout_s: float = 30) -> int:
        code = self.process.wait(timeout_s)
        while (record := self._lines.get(timeout=timeout_s)) is not None:
            self.events.append(record)
        return code


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BROKER, *args], capture_output=True, text=True, timeout=60, check=False, env=env
    )


def serve_refused(
    store_dir: pathlib.Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`serve` on `store_dir` when it is expected to refuse to start (it exits by itself)."""
    return run_cli("serve", "--listen", "127.0.0.1:0", "--store-dir", str(store_dir), env=env)
