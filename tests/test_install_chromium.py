"""tests/install-chromium.sh (run by `make install-test`): shellcheck clean, does nothing where
Chromium is installed, and names what is missing where it cannot install it."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

from tests.deploy.conftest import venv_tool

SCRIPT = pathlib.Path(__file__).with_name("install-chromium.sh")


def run_script(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False
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


def test_with_chromium_installed_it_does_nothing() -> None:
    result = run_script(dict(os.environ))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_without_chromium_or_apt_it_names_what_is_missing(tmp_path: pathlib.Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dpkg-query", "grep"):  # what it needs to look, but no chromium or apt-get
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    result = run_script({"PATH": str(bin_dir), "HOME": str(tmp_path)})
    assert result.returncode == 1
    assert "install-chromium:" in result.stderr
    assert "chromium" in result.stderr.removeprefix("install-chromium:")
