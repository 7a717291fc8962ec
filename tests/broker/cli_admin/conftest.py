"""A broker process per test module for the `rmq-broker admin` tests, and a client of it."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator, Iterator

import pytest

from rmq_client.producer import Producer, open_producer
from tests.daemon import Daemon


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One broker process for a test module (each test uses topics and groups of its own)."""
    running = Daemon(pathlib.Path(tmp_path_factory.mktemp("cli-admin")) / "store")
    yield running
    running.stop()


@pytest.fixture
async def client(daemon: Daemon) -> AsyncIterator[Producer]:
    async with open_producer("127.0.0.1", daemon.port) as producer:
        yield producer
