"""Running the official RocketMQ 5 Python client (`.venv-rmq5`, tests/grpc/install-client.sh)
in a subprocess: its `rocketmq` package clashes with the 4.x client of the project's venv, so it
is never imported here. Scripts print one JSON line last; that line is the result."""

from __future__ import annotations

import json
import pathlib
import subprocess
from collections.abc import Mapping

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLIENT_PYTHON = ROOT / ".venv-rmq5" / "bin" / "python"
HERE = pathlib.Path(__file__).parent


def run_official(
    *argv: str, env: Mapping[str, str] | None = None, timeout_s: float = 180
) -> subprocess.CompletedProcess[str]:
    """`argv` run by the client's interpreter (a script of this folder and its arguments, or
    `-c SOURCE`); fails the test when it is not installed or exits non-zero."""
    if not CLIENT_PYTHON.exists():
        pytest.fail("the RocketMQ 5 client is not installed: bash tests/grpc/install-client.sh")
    done = subprocess.run(
        [str(CLIENT_PYTHON), *argv],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(ROOT / ".venv-rmq5"), **(env or {})},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def run_script(
    script: str, *args: str, env: Mapping[str, str] | None = None, timeout_s: float = 180
) -> dict[str, object]:
    """The JSON result of `script` (a file of this folder) run with `args`."""
    done = run_official(str(HERE / script), *args, env=env, timeout_s=timeout_s)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(result, dict)
    return result
