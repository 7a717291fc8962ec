"""The example configurations load with the broker's loader and keep what their comments promise;
the operator's guide documents exactly the keys the loader knows."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from broker.config import BrokerConfig, load_config
from store.config import FlushDiskType, MessageStoreConfig
from tests.deploy.conftest import DEPLOY

SYNC = DEPLOY / "broker-sync.toml"
ASYNC = DEPLOY / "broker-async.toml"
CLIENT_DEFAULT_SEND_TIMEOUT_MS = 3000


def test_sync_example_is_durable_and_answers_inside_the_client_timeout() -> None:
    config = load_config(str(SYNC), environ={})
    assert config.store.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert config.store.sync_flush_timeout_ms < CLIENT_DEFAULT_SEND_TIMEOUT_MS
    assert config.store.store_path_root_dir == "/var/lib/rmq-broker"


def test_async_example_flushes_in_the_background() -> None:
    config = load_config(str(ASYNC), environ={})
    assert config.store.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert config.store.flush_interval_commit_log_ms == 500


@pytest.mark.parametrize("path", [SYNC, ASYNC], ids=lambda p: p.name)
def test_examples_expose_metrics_and_the_standard_port(path: Path) -> None:
    config = load_config(str(path), environ={})
    assert (config.listen.port, config.metrics_listen and config.metrics_listen.port) == (
        10911,
        5557,
    )


def test_environment_overrides_the_example_file() -> None:
    config = load_config(
        str(SYNC),
        environ={"RMQ_FLUSH_DISK_TYPE": "ASYNC_FLUSH", "RMQ_STORE_PATH_ROOT_DIR": "/data"},
    )
    assert config.store.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert config.store.store_path_root_dir == "/data"


def documented_keys() -> set[str]:
    text = (DEPLOY / "README.md").read_text()
    section = text.split("## 2. Configure it", 1)[1].split("## 3.", 1)[0]
    return set(re.findall(r"^\| `([a-z0-9_]+)` \|", section, re.MULTILINE))


def test_guide_documents_every_configuration_key_and_no_other() -> None:
    broker_keys = {f.name for f in dataclasses.fields(BrokerConfig)} - {"store"}
    store_keys = {f.name for f in dataclasses.fields(MessageStoreConfig)}
    documented = documented_keys()
    assert sorted((broker_keys | store_keys) - documented) == []
    assert sorted(documented - broker_keys - store_keys) == []
