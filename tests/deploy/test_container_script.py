"""deploy/container-test.sh: shellcheck clean, and it never passes silently where it cannot run.

The end-to-end run itself (podman build, run, SIGTERM, restart) is `make test-container`.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.deploy.conftest import DEPLOY, venv_tool

SCRIPT = DEPLOY / "container-test.sh"


def run_script(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30, check=False
    )


def test_shellcheck_finds_nothing() -> None:
    result = subprocess.run(
        [venv_tool("shellcheck"), "--severity=info", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_without_podman_or_apt_it_says_why_and_fails(tmp_path: Path) -> None:
    # An empty PATH: no podman, no apt-get to install it.
    result = run_script({"PATH": str(tmp_path), "HOME": str(tmp_path)})
    assert result.returncode == 2
    assert "cannot run: podman runc mmdebstrap not installed" in result.stderr
    assert "RMQ_CONTAINER_TEST=skip" in result.stderr


def test_an_explicit_skip_passes_and_says_so(tmp_path: Path) -> None:
    result = run_script({"PATH": str(tmp_path), "RMQ_CONTAINER_TEST": "skip"})
    assert result.returncode == 0
    assert result.stderr.strip() == "container-test: skipped: RMQ_CONTAINER_TEST=skip"
