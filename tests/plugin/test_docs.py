"""docs/testing.md's examples run as written (its pytest project runs in test_pytest_plugin).

The shell blocks run with bash on a free port, `rmq-broker` from this interpreter's directory
on the PATH; the container block with `podman_standin` in place of podman.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys

from tests.plugin import docs

STANDIN = pathlib.Path(__file__).with_name("podman_standin.py")
#: the labels the suite runs; java and go snippets are the only ones it may leave out
RUN_LABELS = {"script", "cli", "podman"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def shell_env(tmp_path: pathlib.Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    podman = bin_dir / "podman"
    podman.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    podman.chmod(0o755)
    state = tmp_path / "podman-state"
    state.mkdir()
    path = os.pathsep.join([str(bin_dir), str(pathlib.Path(sys.executable).parent)])
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("RMQ_")},
        "PATH": path + os.pathsep + os.environ.get("PATH", ""),
        "PORT": str(free_port()),
        "PODMAN_STANDIN_STATE": str(state),
    }


def run_block(label: str, tmp_path: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", docs.block("sh", label)],
        cwd=tmp_path,
        env=shell_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_block_is_run_or_is_a_java_or_go_snippet() -> None:
    project = docs.project_files()
    for block in docs.blocks():
        if block.language in {"java", "go"}:
            assert block.label == "not-run", block
        else:
            assert block.label in RUN_LABELS or block.label in project, block
    assert {"conftest.py", "pytest.ini", "test_cpp_client.py"} <= set(project)


def test_the_subprocess_script(tmp_path: pathlib.Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", docs.block("python", "script")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("name server for the clients: 127.0.0.1:")
    assert result.stdout.endswith("sent: SEND_OK\n")


def test_the_shell_block_serves_sends_and_stops(tmp_path: pathlib.Path) -> None:
    result = run_block("cli", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    assert (summary["sent"], summary["failed"]) == (10, 0)
    log = (tmp_path / "broker.log").read_text()
    assert '"event": "shutdown_complete"' in log


def test_the_container_block(tmp_path: pathlib.Path) -> None:
    result = run_block("podman", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    assert (summary["sent"], summary["failed"]) == (10, 0)
    log = (tmp_path / "podman-state" / "rmq-test.log").read_text()
    assert '"flush_disk_type": "SYNC_FLUSH"' in log
    assert '"event": "shutdown_complete"' in log
    assert not (tmp_path / "podman-state" / "rmq-test.pid").exists()
