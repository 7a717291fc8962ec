"""The tests' handle on a power-cut file system: boots of `tests.powercut.serve` on one backing
directory, each a separate process, so the mount is served while a broker process uses it.

    fs = PowerCutFS(tmp_path)      # backing dir, mountpoint and control socket under tmp_path
    fs.mount()
    ... a broker writes under fs.mountpoint, is SIGKILLed ...
    stats = fs.cut()                # unsynced bytes and entries are gone; fs is unmounted
    fs.mount()                      # power back on: the next boot, on what survived
    fs.set_eio(True)                # fsync/fsyncdir fail with EIO from now on
    fs.close()                      # teardown: unmount whatever the state (lazily if busy)
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]


class PowerCutError(RuntimeError):
    pass


class PowerCutFS:
    def __init__(self, base: pathlib.Path) -> None:
        self.backing = base / "powercut-backing"
        self.mountpoint = base / "powercut-mnt"
        self.control = base / "powercut.sock"
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None
        self.log = base / "powercut.log"
        self.cuts = 0

    def mount(self, timeout_s: float = 30) -> None:
        if self.process is not None:
            raise PowerCutError("already mounted")
        self.control.unlink(missing_ok=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.powercut.serve",
                    str(self.backing),
                    str(self.mountpoint),
                    str(self.control),
                ],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout_s
        while not (self.control.exists() and os.path.ismount(self.mountpoint)):
            if self.process.poll() is not None:
                self.process = None
                raise PowerCutError(f"file system did not mount: {self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise PowerCutError("file system did not mount in time")
            time.sleep(0.02)

    def _ask(self, request: str, timeout_s: float = 120) -> dict[str, object]:
        if self.process is None:
            raise PowerCutError("not mounted")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(str(self.control))
            sock.sendall(request.encode() + b"\n")
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    raise PowerCutError(f"no answer to {request!r}: {self.log.read_text()[-2000:]}")
                answer += chunk
        reply: dict[str, object] = json.loads(answer)
        if not reply.get("ok"):
            raise PowerCutError(f"{request!r} failed: {reply.get('error')}")
        return reply

    def _ended(self) -> None:
        assert self.process is not None
        self.process.wait(60)
        self.process = None

    def cut(self, seed: int = 0, keep: float = 0.0, tear: float = 0.0) -> dict[str, int]:
        """Power off: every byte and entry no fsync covered is undone. Processes using the
        mount must have ended first (SIGKILL the broker, then cut). Returns what was undone."""
        reply = self._ask(f"cut {seed} {keep} {tear}")
        self._ended()
        self.cuts += 1
        return {k: v for k, v in reply.items() if isinstance(v, int) and not isinstance(v, bool)}

    def unmount(self) -> None:
        """A clean unmount: everything written is kept."""
        self._ask("unmount")
        self._ended()

    def set_eio(self, on: bool, *, dirs: bool | None = None) -> int:
        """fsync of files fails with EIO while `on`, fsync of directories while `dirs` (by
        default: `on` too); how many fsyncs have failed so far."""
        dirs = on if dirs is None else dirs
        return int(str(self._ask(f"eio {int(on)} {int(dirs)}")["eio_count"]))

    def journal_size(self) -> tuple[int, int]:
        """(files with unsynced bytes, directory operations not yet durable)."""
        reply = self._ask("stats")
        return int(str(reply["files"])), int(str(reply["ops"]))

    def close(self) -> None:
        """Unmount whatever state things are in; used at teardown, also after a failure."""
        if self.process is not None:
            try:
                self.unmount()
            except (PowerCutError, OSError, subprocess.TimeoutExpired):
                subprocess.run(
                    ["fusermount3", "-u", "-z", str(self.mountpoint)],
                    check=False,
                    capture_output=True,
                )
                if self.process is not None:
                    self.process.kill()
                    self.process.wait(30)
                    self.process = None
        if os.path.ismount(self.mountpoint):
            subprocess.run(
                ["fusermount3", "-u", "-z", str(self.mountpoint)], check=False, capture_output=True
            )
