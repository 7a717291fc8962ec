"""Fixtures shared by the tests that drive the official C++ client."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator

import pytest

#: every HOME `client_home` has set, in order: the C++ client runs in this process and sets up
#: its log directory once, under the HOME of the first test that starts it
CLIENT_HOMES: list[pathlib.Path] = []


@pytest.fixture
def client_home(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """HOME for the client's logs (`~/logs/rocketmq-cpp`), restored afterwards."""
    home = tmp_path / "home"
    home.mkdir()
    CLIENT_HOMES.append(home)
    saved = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    try:
        yield home
    finally:
        if saved is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = saved
