"""Fixtures shared by the tests that drive the official C++ client."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator

import pytest


@pytest.fixture
def client_home(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """HOME for the client's logs (`~/logs/rocketmq-cpp`), restored afterwards."""
    home = tmp_path / "home"
    home.mkdir()
    saved = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    try:
        yield home
    finally:
        if saved is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = saved
