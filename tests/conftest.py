"""Shared fixtures: a broker configuration on loopback port 0 with small segments, a running
broker in the test's nursery, and a connected client stub.

The broker runs in-process (`broker.server.serve`), so every test gets real sockets, a real
mmap'ed store in its own temporary directory and a graceful shutdown at teardown.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from hypothesis import settings

from broker.config import BrokerConfig, build_config
from broker.server import BrokerServer, serve
from rmq_client.producer import Producer, open_producer

# No per-example deadline: it is a timing assertion (200 ms by default) that fails on a loaded
# machine; a hung example is still caught by the pytest timeout.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

#: small segments so rollover happens in tests, still far above one message
TEST_SEGMENT_SIZE = 1 << 20


def make_config(store_dir: pathlib.Path, **overrides: object) -> BrokerConfig:
    """A broker on 127.0.0.1, port 0, ASYNC_FLUSH, 1 MiB segments and a small message index,
    under `store_dir`."""
    raw: dict[str, object] = {
        "listen": "127.0.0.1:0",
        "store_path_root_dir": str(store_dir),
        "mapped_file_size_commit_log": TEST_SEGMENT_SIZE,
        "shutdown_timeout_s": 5.0,
        # A small message index: the default one takes 20 MB of disk per store.
        "max_hash_slot_num": 5_000,
        "max_index_num": 20_000,
    }
    raw.update(overrides)
    return build_config(raw)


@pytest.fixture
def broker_config(tmp_path: pathlib.Path) -> BrokerConfig:
    return make_config(tmp_path / "store")


class RunningBroker:
    """A broker started in a nursery; `stop()` shuts it down gracefully and waits."""

    def __init__(self, server: BrokerServer, done: trio.Event) -> None:
        self.server = server
        self.done = done

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def config(self) -> BrokerConfig:
        return self.server.broker.config

    async def stop(self, timeout_s: float = 15.0) -> None:
        self.server.shutdown()
        with trio.fail_after(timeout_s):
            await self.done.wait()


async def start_broker(nursery: trio.Nursery, config: BrokerConfig) -> RunningBroker:
    done = trio.Event()

    async def run(*, task_status: trio.TaskStatus[BrokerServer]) -> None:
        try:
            await serve(config, task_status=task_status)
        finally:
            done.set()

    server: BrokerServer = await nursery.start(run)
    return RunningBroker(server, done)


@pytest.fixture
async def broker(
    nursery: trio.Nursery, broker_config: BrokerConfig
) -> AsyncIterator[RunningBroker]:
    running = await start_broker(nursery, broker_config)
    yield running
    await running.stop()


@pytest.fixture
async def producer(broker: RunningBroker) -> AsyncIterator[Producer]:
    async with open_producer("127.0.0.1", broker.port) as client:
        yield client


def replace_store(config: BrokerConfig, **changes: Any) -> BrokerConfig:
    """`config` with some MessageStoreConfig fields changed."""
    return dataclasses.replace(config, store=dataclasses.replace(config.store, **changes))
