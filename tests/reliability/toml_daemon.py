"""A `rmq-broker serve` subprocess configured only by a TOML file (`--config`), as an operator
runs it: tiny SYNC_FLUSH segments, port 0 read back from the `listening` log line, SIGKILL and
restart on the same store. No RMQ_* variable of the test environment reaches the daemon.
"""

from __future__ import annotations

import json
import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading

BROKER = [sys.executable, "-m", "broker"]
#: tiny segments: every few hundred messages a segment fills up, ends in a BLANK and rolls over
SEGMENT_SIZE = 32 * 1024


def write_config(path: pathlib.Path, store_dir: pathlib.Path, **extra: object) -> pathlib.Path:
    """A broker TOML with a SYNC_FLUSH store of `SEGMENT_SIZE` segments; `extra` adds store keys."""
    lines = [
        "[broker]",
        'listen = "127.0.0.1:0"',
        'log_level = "info"',
        "[store]",
        f"store_path_root_dir = {json.dumps(str(store_dir))}",
        'flush_disk_type = "SYNC_FLUSH"',
        f"mapped_file_size_commit_log = {SEGMENT_SIZE}",
        "sync_flush_timeout_ms = 5000",
        "check_crc_on_recover = true",
        "max_hash_slot_num = 5000",  # a small message index: the default takes 20 MB
        "max_index_num = 20000",
        'grpc_listen = "none"',  # the default port would be shared by brokers running at once
        *(f"{key} = {json.dumps(value)}" for key, value in extra.items()),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


class TomlDaemon:
    """`rmq-broker serve --config <toml>`; the bound port comes from its `listening` log line."""

    def __init__(self, config: pathlib.Path, wait: bool = True) -> None:
        # Only the TOML file configures it: no RMQ_* variable of the test environment leaks in.
        env = {k: v for k, v in os.environ.items() if not k.startswith("RMQ_")}
        self.process = subprocess.Popen(
            [*BROKER, "serve", "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        self.port = self._listening_port() if wait else 0

    def _pump(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.put(line)
        self.lines.put(None)

    def _listening_port(self) -> int:
        while (line := self.lines.get(timeout=60)) is not None:
            self.seen.append(line)
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("event") == "listening":
                return int(record["port"])
        raise AssertionError("daemon ended before listening:\n" + "".join(self.seen[-20:]))

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as after a crash."""
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> int:
        """SIGTERM and wait for the graceful shutdown; the exit code."""
        self.process.terminate()
        return self.process.wait(30)

    def events(self, name: str) -> list[dict[str, object]]:
        """The log records named `name` among the lines received so far."""
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
        found: list[dict[str, object]] = []
        for line in self.seen:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("event") == name:
                found.append(record)
        return found
