"""pytest plugin: rmq-broker instances for an application's own test suite.

Registered as the `pytest11` entry point `rmq_broker`, so installing rmq-broker into a
virtualenv makes these fixtures available to every test there:

- `rmq_broker`: a broker of its own for one test (`rmq_client.broker_process.BrokerProcess`:
  `.address`, `.namesrv_addr`, `.store_dir`, `.logs`, `.restart()`, `.kill()`, `.stop()`);
- `rmq_broker_session`: one broker for the whole run;
- `rmq_broker_factory`: `rmq_broker_factory(flush_disk_type=..., acl_file=..., tls=...,
  config={...})` starts more brokers, all stopped when the test ends;
- `rmq_producer` and `rmq_consumer`: a blocking producer and a blocking consumer (they need no
  Trio test mode) connected to `rmq_broker`. Overriding `rmq_broker` in a conftest with a
  fixture that returns `rmq_broker_session` points them at the shared broker.

Options: `--rmq-broker-executable` (ini `rmq_broker_executable`) runs another broker command,
`--rmq-keep-store` (ini `rmq_keep_store`) keeps every store for a post-mortem (their paths are
listed at the end of the run). Ini keys `rmq_broker_config` (`key = value` lines, given to
every broker), `rmq_flush_disk_type`, `rmq_start_timeout` and `rmq_log_lines`. When a test
fails, the last `rmq_log_lines` lines each broker it used logged during it go into its report.
"""

from __future__ import annotations

import hashlib
import pathlib
import re
import shutil
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from rmq_client.blocking import BlockingProducer
from rmq_client.blocking_consumer import BlockingConsumer
from rmq_client.broker_process import (
    BrokerOptions,
    BrokerProcess,
    BrokerStartError,
    TlsFiles,
    parse_executable,
)

__all__ = ["BrokerFactory"]

_FLUSH_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")
_GROUP_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass
class _Settings:
    executable: list[str]
    keep_store: bool
    config: dict[str, str]
    flush_disk_type: str
    start_timeout_s: float
    log_lines: int
    kept: list[pathlib.Path] = field(default_factory=list)
    #: the session-scoped brokers, whose logs go with every failing test that used them
    session_brokers: list[BrokerProcess] = field(default_factory=list)


_SETTINGS = pytest.StashKey[_Settings]()
_TEST_BROKERS = pytest.StashKey[list[BrokerProcess]]()
#: where each session broker's log stood when a test began: its report shows only what follows
_LOG_MARKS = pytest.StashKey[dict[int, int]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rmq-broker", "rmq-broker instances for tests")
    group.addoption(
        "--rmq-broker-executable",
        default=None,
        help="command that runs rmq-broker (default: the rmq-broker script of this Python)",
    )
    group.addoption(
        "--rmq-keep-store",
        action="store_true",
        default=None,
        help="keep the brokers' stores after the run (their paths are listed at the end)",
    )
    parser.addini("rmq_broker_executable", "command that runs rmq-broker", default="")
    parser.addini("rmq_keep_store", "keep the brokers' stores", type="bool", default=False)
    parser.addini(
        "rmq_broker_config", "`key = value` lines: broker settings", type="linelist", default=[]
    )
    parser.addini("rmq_flush_disk_type", "ASYNC_FLUSH or SYNC_FLUSH", default="ASYNC_FLUSH")
    parser.addini("rmq_start_timeout", "seconds a broker may take to listen", default="60")
    parser.addini("rmq_log_lines", "broker log lines in a failing test's report", default="50")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SETTINGS] = _read_settings(config)


def _read_settings(config: pytest.Config) -> _Settings:
    command = config.getoption("rmq_broker_executable") or config.getini("rmq_broker_executable")
    keep = config.getoption("rmq_keep_store")
    flush = str(config.getini("rmq_flush_disk_type")).strip().upper()
    if flush not in _FLUSH_TYPES:
        raise pytest.UsageError(f"rmq_flush_disk_type: {flush!r} is not one of {_FLUSH_TYPES}")
    settings: dict[str, str] = {}
    for line in config.getini("rmq_broker_config"):
        key, sep, value = str(line).partition("=")
        if not sep or not key.strip():
            raise pytest.UsageError(f"rmq_broker_config: expected `key = value`, got {line!r}")
        settings[key.strip()] = value.strip()
    try:
        return _Settings(
            executable=parse_executable(str(command) if command else None),
            keep_store=bool(keep if keep is not None else config.getini("rmq_keep_store")),
            config=settings,
            flush_disk_type=flush,
            start_timeout_s=_positive(config, "rmq_start_timeout", float),
            log_lines=int(_positive(config, "rmq_log_lines", int)),
        )
    except ValueError as exc:
        raise pytest.UsageError(f"rmq-broker: {exc}") from None


def _positive(config: pytest.Config, name: str, kind: Callable[[str], float]) -> float:
    text = str(config.getini(name)).strip()
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not a number") from None
    if not value > 0:
        raise ValueError(f"{name}: {text!r} is not positive")
    return value


def pytest_report_header(config: pytest.Config) -> str:
    settings = config.stash[_SETTINGS]
    return f"rmq-broker: {' '.join(settings.executable)}"


class BrokerFactory:
    """Starts brokers with options; `close()` stops them all and removes their stores."""

    def __init__(self, settings: _Settings, tmp_factory: pytest.TempPathFactory) -> None:
        self._settings = settings
        self._tmp = tmp_factory
        self.brokers: list[BrokerProcess] = []

    def __call__(
        self,
        *,
        flush_disk_type: str | None = None,
        acl_file: pathlib.Path | None = None,
        tls: TlsFiles | None = None,
        config: dict[str, object] | None = None,
    ) -> BrokerProcess:
        settings = self._settings
        options = BrokerOptions(
            flush_disk_type=flush_disk_type or settings.flush_disk_type,
            acl_file=acl_file,
            tls=tls,
            config={**settings.config, **(config or {})},
        )
        store_dir = self._tmp.mktemp("rmq-store")
        try:
            broker = BrokerProcess(
                options,
                store_dir=store_dir,
                executable=settings.executable,
                start_timeout_s=settings.start_timeout_s,
            )
        except BrokerStartError:
            self._discard(store_dir)
            raise
        self.brokers.append(broker)
        return broker

    def _discard(self, store_dir: pathlib.Path) -> None:
        if self._settings.keep_store:
            self._settings.kept.append(store_dir)
        else:
            shutil.rmtree(store_dir, ignore_errors=True)

    def close(self) -> None:
        errors: list[BaseException] = []
        for broker in self.brokers:
            try:
                broker.stop()
            except (OSError, TimeoutError) as exc:
                errors.append(exc)
            self._discard(broker.store_dir)
        if errors:
            raise errors[0]


@pytest.fixture
def rmq_broker_factory(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerFactory]:
    """Start brokers with options: `rmq_broker_factory(flush_disk_type="SYNC_FLUSH")`."""
    factory = BrokerFactory(request.config.stash[_SETTINGS], tmp_path_factory)
    request.node.stash[_TEST_BROKERS] = factory.brokers
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def rmq_broker(rmq_broker_factory: BrokerFactory) -> BrokerProcess:
    """A broker of this test's own, on a free loopback port with an empty store."""
    return rmq_broker_factory()


@pytest.fixture(scope="session")
def rmq_broker_session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    """One broker for the whole run: tests share its topics and groups."""
    settings = request.config.stash[_SETTINGS]
    factory = BrokerFactory(settings, tmp_path_factory)
    try:
        broker = factory()
        settings.session_brokers.append(broker)
        yield broker
    finally:
        factory.close()


@pytest.fixture
def rmq_producer(rmq_broker: BrokerProcess) -> Iterator[BlockingProducer]:
    """A blocking producer connected to `rmq_broker` (plain threads: no Trio mode needed)."""
    with BlockingProducer(rmq_broker.host, rmq_broker.port) as producer:
        yield producer


@pytest.fixture
def rmq_consumer(
    request: pytest.FixtureRequest, rmq_broker: BrokerProcess
) -> Iterator[BlockingConsumer]:
    """A blocking consumer of `rmq_broker` in a group named after the test, so tests that share
    a broker do not share offsets: `rmq_consumer.receive("Topic", count=3)`."""
    digest = hashlib.sha1(request.node.nodeid.encode(), usedforsecurity=False).hexdigest()[:10]
    group = f"pytest_{_GROUP_UNSAFE.sub('_', request.node.name)[:60]}_{digest}"
    with BlockingConsumer(rmq_broker.host, rmq_broker.port, group) as consumer:
        yield consumer


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    brokers = item.config.stash[_SETTINGS].session_brokers
    item.stash[_LOG_MARKS] = {id(broker): broker.log_count for broker in brokers}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        settings = item.config.stash[_SETTINGS]
        marks = item.stash.get(_LOG_MARKS, {})
        for broker in _brokers_of(item, settings):
            tail = broker.logs_since(marks.get(id(broker), 0))[-settings.log_lines :]
            report.sections.append(
                (f"rmq-broker {broker.address} log (last {len(tail)} lines)", "\n".join(tail))
            )
    return report


def _brokers_of(item: pytest.Item, settings: _Settings) -> list[BrokerProcess]:
    brokers: list[BrokerProcess] = []
    if _TEST_BROKERS in item.stash:
        mine = item.stash[_TEST_BROKERS]
        brokers += mine
    if "rmq_broker_session" in getattr(item, "fixturenames", ()):
        brokers.extend(b for b in settings.session_brokers if b not in brokers)
    return brokers


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    kept = config.stash[_SETTINGS].kept
    if kept:
        terminalreporter.section("rmq-broker stores kept")
        for path in kept:
            terminalreporter.write_line(str(path))
