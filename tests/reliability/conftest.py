"""Fixtures of the reliability suite: a real `rmq-broker serve` subprocess on loopback port 0
with a temporary store and small segments, its JSON log events, and readers of its store.

The daemon is configured the way an operator would: `RMQ_*` environment variables (the keys of
`broker/config.py`) on top of the flags. A thread drains its stderr all the time, so a broker
that logs a lot never blocks on a full pipe. Long variants are sized by `RMQ_SOAK=1`.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator, Mapping

import pytest

from protocol.headers import SEND_HEADER_V1_NAMES
from store.decode import CommitLogRecord
from store.reader import CommitLogReader
from tests.daemon import Daemon as BaseDaemon

SOAK = bool(os.environ.get("RMQ_SOAK"))
#: small segments so that rollover, END_OF_FILE blanks and new segments happen within a test
SEGMENT_SIZE = 64 * 1024
#: the send header's V1 wire names, in the order of the V2 letters a..n
V1_NAMES = SEND_HEADER_V1_NAMES


class Daemon(BaseDaemon):
    """The daemon on small segments (`SEGMENT_SIZE`), so that rollover happens within a test."""

    def __init__(
        self,
        store_dir: pathlib.Path,
        *extra: str,
        env: Mapping[str, str] | None = None,
        wait: bool = True,
    ) -> None:
        small = {"RMQ_MAPPED_FILE_SIZE_COMMIT_LOG": str(SEGMENT_SIZE), **(env or {})}
        super().__init__(store_dir, *extra, env=small, wait=wait)


@pytest.fixture
def store_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "store"


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    """Daemons a test starts; any still running at teardown are killed."""
    started: list[Daemon] = []
    yield started
    for daemon in started:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait(30)


def read_records(store_dir: pathlib.Path) -> list[CommitLogRecord]:
    """Every record up to the durable offset, CRC checked (`store.reader`, as `inspect` does)."""
    with CommitLogReader(str(store_dir)) as reader:
        return list(reader.iter_records(reader.min_offset))


def segment_paths(store_dir: pathlib.Path) -> list[pathlib.Path]:
    return sorted((store_dir / "commitlog").glob("[0-9]" * 20))
