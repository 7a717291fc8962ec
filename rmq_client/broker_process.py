"""An rmq-broker in a subprocess, for the test suites of applications that talk to RocketMQ.

    with BrokerProcess() as broker:
        ...  # point a client at broker.address (name server: broker.namesrv_addr)

`BrokerProcess` runs `rmq-broker serve` on a free loopback port with a store of its own (a
temporary directory, removed on `close()` unless `keep_store`), and returns once the broker logs
that it listens: no sleep, no polling of the port. Its log lines (JSON, one event a line) are
read all the time by a thread and kept in `logs`. `restart()` starts it again on the same port
and store; `kill()` is a SIGKILL, as after a crash; `stop()` is the graceful SIGTERM.

The broker runs as an executable, never imported: the `rmq-broker` console script next to the
running interpreter, else `python -m broker`, or whatever command `executable` names.
Its configuration comes only from `BrokerOptions`: `RMQ_*` variables of the calling process are
not passed on, so a developer's own settings never leak into a test broker.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import json
import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final

__all__ = [
    "TEST_DEFAULTS",
    "BrokerOptions",
    "BrokerProcess",
    "BrokerStartError",
    "TlsFiles",
    "default_executable",
]

#: settings of a test broker unless its options say otherwise: 64 MiB commit-log segments and a
#: small message index (the defaults take 1 GiB and 20 MB of disk as soon as a store is created);
#: no gRPC port, whose default (8081) two brokers would compete for; an HA port of the system's
#: choosing, not the listen port + 1, which another process may hold when a broker restarts on
#: its port
TEST_DEFAULTS: Final[Mapping[str, str]] = {
    "mapped_file_size_commit_log": str(64 << 20),
    "max_hash_slot_num": "5000",
    "max_index_num": "20000",
    "log_level": "info",
    "grpc_listen": "none",
    "ha_listen_port": "0",
}
#: how many log lines a broker keeps (the oldest go first)
MAX_LOG_LINES: Final = 20_000
DEFAULT_START_TIMEOUT_S: Final = 60.0
DEFAULT_STOP_TIMEOUT_S: Final = 30.0
_ENV_PREFIX: Final = "RMQ_"
_READY_EVENT: Final = "listening"
#: brokers started and not stopped yet: closed when the interpreter exits, so a script or test
#: run that forgot one leaves neither the process nor its temporary store behind
_RUNNING: set[BrokerProcess] = set()


class BrokerStartError(RuntimeError):
    """The broker exited, or did not listen in time; the message ends with its last log lines."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """TLS on the broker port. `mode`: "enforcing" (TLS only) or "permissive" (TLS and plain
    text); `client_auth`: "none", "optional" or "require" (client certificates chain to `ca`)."""

    cert: pathlib.Path
    key: pathlib.Path
    mode: str = "enforcing"
    ca: pathlib.Path | None = None
    client_auth: str = "none"


@dataclass(frozen=True, slots=True)
class BrokerOptions:
    """How a broker is configured: flush type, an ACL file (plain_acl.yml shape), TLS, and any
    other configuration key in `config` (snake_case, as in the broker's TOML file)."""

    flush_disk_type: str = "ASYNC_FLUSH"
    acl_file: pathlib.Path | None = None
    tls: TlsFiles | None = None
    config: Mapping[str, object] = field(default_factory=dict)

    def settings(self) -> dict[str, str]:
        """Every configuration key given to the broker, as text (`config` wins over the rest)."""
        values: dict[str, object] = dict(TEST_DEFAULTS)
        if self.acl_file is not None:
            values.update(acl_enable=True, acl_file=self.acl_file)
        if self.tls is not None:
            values.update(
                tls_mode=self.tls.mode,
                tls_server_cert=self.tls.cert,
                tls_server_key=self.tls.key,
                tls_server_need_client_auth=self.tls.client_auth,
            )
            if self.tls.ca is not None:
                values["tls_server_ca"] = self.tls.ca
        values.update(self.config)
        return {key: _text(value) for key, value in values.items()}

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """`base` without its `RMQ_*` variables, plus one `RMQ_<KEY>` per setting."""
        env = {name: value for name, value in base.items() if not name.startswith(_ENV_PREFIX)}
        for key, value in self.settings().items():
            env[_ENV_PREFIX + key.upper()] = value
        return env


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def default_executable() -> list[str]:
    """The `rmq-broker` console script beside the running interpreter, else `python -m broker`."""
    script = pathlib.Path(sys.executable).with_name("rmq-broker")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "broker"]


def parse_executable(command: str | Sequence[str] | None) -> list[str]:
    """A command line (shell words, e.g. "python -m broker") or argument list; None: default."""
    if command is None:
        return default_executable()
    words = shlex.split(command) if isinstance(command, str) else list(command)
    if not words:
        raise ValueError("the rmq-broker executable is empty")
    return words


class BrokerProcess:
    """One `rmq-broker serve` on `host` (loopback), started by the constructor."""

    def __init__(
        self,
        options: BrokerOptions | None = None,
        *,
        store_dir: pathlib.Path | None = None,
        executable: str | Sequence[str] | None = None,
        keep_store: bool = False,
        host: str = "127.0.0.1",
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
    ) -> None:
        self.options = options or BrokerOptions()
        self.command = parse_executable(executable)
        self.host = host
        self.start_timeout_s = start_timeout_s
        self._own_store = store_dir is None
        self.keep_store = keep_store
        if store_dir is None:
            store_dir = pathlib.Path(tempfile.mkdtemp(prefix="rmq-broker-"))
        self.store_dir = store_dir
        self.port = 0
        #: the RocketMQ 5 gRPC port, when the broker opens one (the `grpc_listen` setting)
        self.grpc_port: int | None = None
        self._lines: collections.deque[str] = collections.deque(maxlen=MAX_LOG_LINES)
        self._line_count = 0
        self._changed = threading.Condition()
        self._process: subprocess.Popen[str] | None = None
        self._pump: threading.Thread | None = None
        try:
            self._start()
        except BrokerStartError:
            self._remove_own_store()
            raise

    # -- addresses and state ------------------------------------------------------------------

    @property
    def address(self) -> str:
        """`HOST:PORT` of the broker port (producers, consumers, admin tools)."""
        return f"{self.host}:{self.port}"

    @property
    def namesrv_addr(self) -> str:
        """What clients take as name server: the broker port answers name-server calls too."""
        return self.address

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def logs(self) -> list[str]:
        """The log lines read so far, oldest first (at most `MAX_LOG_LINES`), across restarts."""
        with self._changed:
            return list(self._lines)

    @property
    def log_count(self) -> int:
        """How many log lines were read in all (a mark for `logs_since`)."""
        with self._changed:
            return self._line_count

    def logs_since(self, mark: int) -> list[str]:
        """The lines read after `log_count` was `mark` (as many as are still kept)."""
        with self._changed:
            first_kept = self._line_count - len(self._lines)
            return list(self._lines)[max(0, mark - first_kept) :]

    def events(self) -> list[dict[str, object]]:
        """The log lines that are JSON objects (the broker's structured events)."""
        found: list[dict[str, object]] = []
        for line in self.logs:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                found.append(record)
        return found

    # -- lifecycle ------------------------------------------------------------------------------

    def _start(self) -> None:
        argv = [
            *self.command,
            "serve",
            "--listen",
            f"{self.host}:{self.port}",
            "--store-dir",
            str(self.store_dir),
            "--flush-disk-type",
            self.options.flush_disk_type,
        ]
        mark = self.log_count
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                env=self.options.environment(os.environ),
                start_new_session=True,  # a Ctrl-C in the terminal goes to the test run only
            )
        except OSError as exc:
            raise BrokerStartError(f"cannot run {shlex.join(argv)}: {exc}") from None
        self._process = process
        _RUNNING.add(self)
        self._pump = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._pump.start()
        self.port = self._wait_ready(process, mark)

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            with self._changed:
                self._lines.append(line.rstrip("\n"))
                self._line_count += 1
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def _wait_ready(self, process: subprocess.Popen[str], mark: int) -> int:
        deadline = time.monotonic() + self.start_timeout_s
        seen = mark
        with self._changed:
            while True:
                for line in self.logs_since(seen):
                    port = _listening_port(line)
                    if port is not None:
                        self.grpc_port = _listening_port(line, "grpc_port")
                        return port
                seen = self._line_count
                if process.poll() is not None and not self._pump_alive():
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, 1.0))
        code = process.poll()
        if code is None:
            reason = f"did not listen within {self.start_timeout_s:g} s"
        else:
            reason = f"exited with code {code} before it listened"
        self.kill()
        raise BrokerStartError(f"rmq-broker {reason}:\n" + "\n".join(self.logs_since(mark)[-40:]))

    def _pump_alive(self) -> bool:
        return self._pump is not None and self._pump.is_alive()

    def _finish(self, timeout_s: float) -> int:
        assert self._process is not None
        code = self._process.wait(timeout_s)
        _RUNNING.discard(self)
        if self._pump is not None:
            self._pump.join(timeout_s)
        return code

    def stop(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, and wait for the graceful shutdown; its exit code (None if never started).
        A broker still running after `timeout_s` is killed and `TimeoutError` raised."""
        if self._process is None:
            return None
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
        try:
            return self._finish(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TimeoutError(f"rmq-broker did not stop within {timeout_s:g} s") from None

    def kill(self) -> int | None:
        """SIGKILL: no shutdown code runs, as after a crash or a power cut of the process."""
        if self._process is None:
            return None
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGKILL)
        return self._finish(DEFAULT_STOP_TIMEOUT_S)

    def restart(self, *, kill: bool = False) -> None:
        """Stop (or with `kill`, SIGKILL) and start again on the same port and store."""
        if kill:
            self.kill()
        else:
            self.stop()
        self._start()

    def close(self) -> None:
        """Stop the broker and remove its temporary store (unless `keep_store`)."""
        try:
            self.stop()
        finally:
            self._remove_own_store()

    def _remove_own_store(self) -> None:
        if self._own_store and not self.keep_store:
            shutil.rmtree(self.store_dir, ignore_errors=True)

    def __enter__(self) -> BrokerProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<BrokerProcess {self.address} {state} store={self.store_dir}>"


def _listening_port(line: str, key: str = "port") -> int | None:
    """`key` of a `listening` log line (the broker port; `grpc_port`: the gRPC one)."""
    if _READY_EVENT not in line:
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("event") != _READY_EVENT:
        return None
    port = record.get(key)
    return port if isinstance(port, int) else None


@atexit.register
def _stop_forgotten() -> None:
    for broker in list(_RUNNING):
        with contextlib.suppress(OSError, TimeoutError):
            broker.close()
