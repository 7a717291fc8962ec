"""An in-process name server on 127.0.0.1 port 0, with its KV config in the test's directory."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import AsyncIterator

import pytest
import trio

from namesrv.config import NamesrvConfig
from namesrv.server import NamesrvServer, serve


@pytest.fixture
def namesrv_config(tmp_path: pathlib.Path) -> NamesrvConfig:
    return NamesrvConfig(
        listen_host="127.0.0.1", listen_port=0, kv_config_path=str(tmp_path / "kvConfig.json")
    )


async def start_namesrv(nursery: trio.Nursery, config: NamesrvConfig) -> NamesrvServer:
    server: NamesrvServer = await nursery.start(serve, config)
    return server


@pytest.fixture
async def namesrv(
    nursery: trio.Nursery, namesrv_config: NamesrvConfig
) -> AsyncIterator[NamesrvServer]:
    server = await start_namesrv(nursery, namesrv_config)
    yield server
    server.shutdown()


def with_changes(config: NamesrvConfig, **changes: object) -> NamesrvConfig:
    return dataclasses.replace(config, **changes)  # type: ignore[arg-type]
