"""Real master and slave brokers on loopback: `rmq-broker serve` subprocesses on small segments,
the slave pointed at the master's HA port through `ha_master_address`."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator, Mapping

import pytest

from tests.integration.conftest import client_home
from tests.reliability.conftest import SOAK, Daemon, read_records, segment_paths

__all__ = ["SOAK", "Daemon", "client_home", "read_records", "segment_paths"]


def start_master(
    store_dir: pathlib.Path, daemons: list[Daemon], env: Mapping[str, str] | None = None
) -> tuple[Daemon, int]:
    """A master (SYNC_MASTER unless `env` says otherwise); it and its HA port."""
    master = Daemon(store_dir, env={"RMQ_BROKER_ROLE": "SYNC_MASTER", **(env or {})})
    daemons.append(master)
    return master, int(str(master.event("ha_listening")["port"]))


def start_slave(
    store_dir: pathlib.Path,
    daemons: list[Daemon],
    ha_port: int,
    env: Mapping[str, str] | None = None,
) -> Daemon:
    slave = Daemon(
        store_dir,
        env={
            "RMQ_BROKER_ROLE": "SLAVE",
            "RMQ_HA_MASTER_ADDRESS": f"127.0.0.1:{ha_port}",
            "RMQ_HA_SEND_HEARTBEAT_INTERVAL": "200",
            **(env or {}),
        },
    )
    daemons.append(slave)
    slave.event("ha_master_connected")
    return slave


def segment_bytes(store_dir: pathlib.Path) -> dict[str, bytes]:
    """Each segment's bytes without its trailing zeros (a pre-created segment is all zeros)."""
    found = {path.name: path.read_bytes().rstrip(b"\0") for path in segment_paths(store_dir)}
    return {name: data for name, data in found.items() if data}


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    """Daemons a test starts; any still running at teardown are killed."""
    started: list[Daemon] = []
    yield started
    for daemon in started:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait(30)
