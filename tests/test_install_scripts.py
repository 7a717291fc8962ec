"""The install scripts of the tests' system packages (run by `make install-test`): shellcheck
clean, nothing done where the packages are installed, and what is missing named where they
cannot be installed."""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess

import pytest

from tests.deploy.conftest import venv_tool

TESTS = pathlib.Path(__file__).parent
#: script, its name in messages, a package it must name when it cannot install
SCRIPTS = [
    (TESTS / "install-chromium.sh", "install-chromium", "chromium"),
    (TESTS / "powercut" / "install-fuse.sh", "install-fuse", "fuse3"),
    (TESTS / "grpc" / "install-node-client.sh", "install-node-client", "nodejs"),
]
IDS = [name for _, name, _ in SCRIPTS]


def run_script(script: pathlib.Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/bash", str(script)], env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    "script",
    [TESTS / "apt-missing.sh", TESTS / "grpc" / "install-client.sh", *(s for s, _, _ in SCRIPTS)],
)
def test_shellcheck_finds_nothing(script: pathlib.Path) -> None:
    result = subprocess.run(
        [venv_tool("shellcheck"), "--severity=info", "-x", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=TESTS.parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("script", "name", "package"), SCRIPTS, ids=IDS)
def test_with_the_packages_installed_it_does_nothing(
    script: pathlib.Path, name: str, package: str
) -> None:
    result = run_script(script, dict(os.environ))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


@pytest.mark.parametrize(("script", "name", "package"), SCRIPTS, ids=IDS)
def test_without_the_packages_or_apt_it_names_what_is_missing(
    tmp_path: pathlib.Path, script: pathlib.Path, name: str, package: str
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dpkg-query", "grep", "dirname"):  # what it needs to look, but no apt-get
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    fake_dpkg = bin_dir / "dpkg-query"  # nothing is installed
    fake_dpkg.unlink()
    fake_dpkg.write_text("#!/bin/sh\nexit 1\n")
    fake_dpkg.chmod(0o755)
    result = run_script(script, {"PATH": str(bin_dir), "HOME": str(tmp_path)})
    assert result.returncode == 1
    line = result.stderr.strip()
    assert line.startswith(f"{name}: missing ")
    assert package in line
    assert "no apt-get" in line


def test_the_5x_client_venv_is_not_remade_while_its_pins_stand(tmp_path: pathlib.Path) -> None:
    """A venv stamped with today's pins is kept as it is: the script touches nothing in it."""
    script = TESTS / "grpc" / "install-client.sh"
    pins = (TESTS / "grpc" / "client-constraints.txt").read_bytes()
    venv = tmp_path / "venv"
    venv.mkdir()
    stamp = venv / f".pins-{hashlib.sha256(pins).hexdigest()[:16]}"
    stamp.touch()
    env = {**os.environ, "RMQ5_CLIENT_VENV": str(venv), "PYTHON": "/bin/false"}
    result = run_script(script, env)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in venv.iterdir()) == [stamp.name]
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / ".pins-0000000000000000").touch()
    result = run_script(script, {**env, "RMQ5_CLIENT_VENV": str(stale)})
    assert result.returncode != 0  # /bin/false cannot make the venv: it tried to remake it
    assert not (stale / ".pins-0000000000000000").exists()
