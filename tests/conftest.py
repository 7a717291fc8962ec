"""Shared fixtures: a broker configuration on loopback port 0 with small segments, a running
broker in the test's nursery, and a connected client stub.

The broker runs in-process (`broker.server.serve`), so every test gets real sockets, a real
mmap'ed store in its own temporary directory and a graceful shutdown at teardown.

`make test` runs the suite in two processes (pytest-xdist, `--dist loadgroup`). The modules of
an `XDIST_GROUPS` group run in one process, one test after another: "crash" holds the tests that
cut a broker's power (FUSE), fill its disk (tmpfs) or SIGKILL it again and again under load, so
that no two of them share the two cores against their bounds; "spark" shares one Spark session
(one JVM) for the run. The groups are named here by path, not by `xdist_group` marks: xdist 3.8
renames a marked test in a way pytest 9 ignores, so its marks group nothing.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

import pytest
import structlog
import trio
from hypothesis import settings

from broker.config import BrokerConfig, build_config
from broker.server import BrokerServer, serve
from rmq_client.producer import Producer, open_producer

#: tests/plugin runs pytest on sample projects in temporary directories
pytest_plugins = ["pytester"]

# The brokers tests start (in this process or as `rmq-broker serve` subprocesses inheriting the
# environment) open no gRPC port unless a test asks for one: the default, 127.0.0.1:8081, would
# be taken by two brokers running at once.
os.environ.setdefault("RMQ_GRPC_LISTEN", "none")


@pytest.fixture(autouse=True)
def _structlog_unconfigured() -> Iterator[None]:
    """A CLI command run in-process (click's CliRunner) configures structlog for the whole
    process, with cached loggers; later tests' `capture_logs` would then see nothing."""
    yield
    if structlog.is_configured():
        structlog.reset_defaults()


# No per-example deadline: it is a timing assertion (200 ms by default) that fails on a loaded
# machine; a hung example is still caught by the pytest timeout.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

#: small segments so rollover happens in tests, still far above one message
TEST_SEGMENT_SIZE = 1 << 20

#: test modules (or directories, ending in "/") that run in one process, one test at a time,
#: under `--dist loadgroup`
XDIST_GROUPS: Final = {
    "crash": (
        "tests/powercut/",
        "tests/integration/test_full_disk.py",
        "tests/integration/test_retention.py",
        "tests/reliability/test_full_disk.py",
        "tests/reliability/test_crash_cycles.py",
        "tests/reliability/test_crash_rollover.py",
        "tests/reliability/test_recovery_repeat.py",
        "tests/store/test_crash.py",
        "tests/ha/test_master_kill.py",
        "tests/ha/test_consumer_failover.py",
    ),
    "spark": (
        "tests/pipeline/test_batch.py",
        "tests/pipeline/test_jobs.py",
        "tests/pipeline/test_retention.py",
        "tests/pipeline/test_stream.py",
    ),
    # one standalone Spark master and worker for the module's tests, not one per worker
    "spark-cluster": ("tests/pipeline/test_cluster.py",),
    # one cluster of name servers and brokers for the module's tests
    "cluster": ("tests/cluster/test_cpp_cluster.py",),
}


def xdist_group(nodeid: str) -> str | None:
    """The `XDIST_GROUPS` group of a test, by its node id; None for most."""
    path = nodeid.split("::", 1)[0]
    return next((g for g, paths in XDIST_GROUPS.items() if path.startswith(paths)), None)


#: fixtures whose tests must be in a group: a test using one outside it is a collection error
FIXTURE_GROUPS: Final = {"powercut": "crash", "small_fs": "crash", "spark": "spark"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            wanted = FIXTURE_GROUPS.get(fixture)
            if wanted is not None and xdist_group(item.nodeid) != wanted:
                raise pytest.UsageError(
                    f"{item.nodeid} uses the {fixture!r} fixture: its module belongs in the "
                    f"{wanted!r} group of XDIST_GROUPS (tests/conftest.py)"
                )


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under `--dist loadgroup`, xdist's scheduler with the groups of `XDIST_GROUPS` (a test's
    scope is its group, else what xdist makes of it); otherwise xdist's own choice."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    scheduler = LoadGroupScheduling(config, log)
    by_mark = scheduler._split_scope
    scheduler._split_scope = lambda nodeid: xdist_group(nodeid) or by_mark(nodeid)
    return scheduler


def make_config(store_dir: pathlib.Path, **overrides: object) -> BrokerConfig:
    """A broker on 127.0.0.1, port 0, ASYNC_FLUSH, 1 MiB segments and a small message index,
    under `store_dir`, without a gRPC port (`grpc_listen="127.0.0.1:0"` opens one)."""
    raw: dict[str, object] = {
        "listen": "127.0.0.1:0",
        "store_path_root_dir": str(store_dir),
        "mapped_file_size_commit_log": TEST_SEGMENT_SIZE,
        "shutdown_timeout_s": 5.0,
        # A small message index: the default one takes 20 MB of disk per store.
        "max_hash_slot_num": 5_000,
        "max_index_num": 20_000,
        "grpc_listen": "none",
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
