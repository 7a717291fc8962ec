"""Fixtures of the power-cut suite: a mounted power-cut file system under the test's tmp_path,
always unmounted at teardown (lazily, if a process still holds it), whatever the test did, and
the broker processes started on it, killed before that."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator

import pytest

from tests.powercut.mount import PowerCutFS
from tests.reliability.conftest import Daemon


@pytest.fixture
def powercut(tmp_path: pathlib.Path) -> Iterator[PowerCutFS]:
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse on this machine: the power-cut file system cannot mount")
    fs = PowerCutFS(tmp_path)
    fs.mount()
    try:
        yield fs
    finally:
        fs.close()


@pytest.fixture
def brokers(powercut: PowerCutFS) -> Iterator[list[Daemon]]:
    """Broker processes a test starts on the power-cut mount; any still running at teardown are
    killed before the file system is unmounted."""
    started: list[Daemon] = []
    yield started
    for daemon in started:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait(30)
