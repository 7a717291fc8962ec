"""A real `rmq-broker namesrv` in a subprocess on 127.0.0.1 port 0, for integration tests."""

from __future__ import annotations

import json
import os
import pathlib
import queue
import subprocess
import sys
import threading

NAMESRV = [sys.executable, "-m", "broker", "namesrv"]


class NamesrvProcess:
    """`events` holds the JSON log lines read so far; a thread drains stderr all the time."""

    def __init__(self, kv_config_path: pathlib.Path, *extra: str) -> None:
        self.process = subprocess.Popen(
            [*NAMESRV, "--listen", "127.0.0.1:0", "--kv-config-path", str(kv_config_path), *extra],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "RMQ_LOG_LEVEL": "info"},
        )
        self.events: list[dict[str, object]] = []
        self._lines: queue.Queue[dict[str, object] | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.port = int(str(self.wait_for("listening")["port"]))

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

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

    def wait_for(self, event: str, timeout_s: float = 60) -> dict[str, object]:
        """The next log record named `event`; AssertionError if the process ends first."""
        while (record := self._lines.get(timeout=timeout_s)) is not None:
            self.events.append(record)
            if record.get("event") == event:
                return record
        raise AssertionError(f"namesrv ended before {event!r}: {self.events[-20:]}")

    def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM, then the exit code once it has shut down."""
        if self.process.poll() is None:
            self.process.terminate()
        code = self.process.wait(timeout_s)
        while (record := self._lines.get(timeout=timeout_s)) is not None:
            self.events.append(record)
        return code


def namesrv_refused(kv_config_path: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """`rmq-broker namesrv` expected to refuse to start (it exits by itself)."""
    return run_namesrv("--listen", "127.0.0.1:0", "--kv-config-path", str(kv_config_path))


def run_namesrv(*args: str) -> subprocess.CompletedProcess[str]:
    """`rmq-broker namesrv ARGS` that is expected to exit by itself."""
    return subprocess.run(
        [*NAMESRV, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
