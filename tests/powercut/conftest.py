"""Fixtures of the power-cut suite: a mounted power-cut file system under the test's tmp_path,
always unmounted at teardown (lazily, if a process still holds it), whatever the test did."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator

import pytest

from tests.powercut.mount import PowerCutFS


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
