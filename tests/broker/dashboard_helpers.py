"""Reading the dashboard's documents over a real socket, from a worker thread as a browser
would (the documents are computed on the broker's event loop, which must stay free to run
them), and an in-process broker with the HTTP port open."""

from __future__ import annotations

import json
import pathlib
import urllib.error
import urllib.request
from typing import Any

import trio

from tests.conftest import RunningBroker, make_config, start_broker


def fetch(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


async def get(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    return await trio.to_thread.run_sync(fetch, port, path, method)


async def document(port: int, name: str, query: str = "") -> dict[str, Any]:
    status, headers, body = await get(port, f"/api/{name}.json{query}")
    assert (status, headers["Content-Type"]) == (200, "application/json"), body
    value = json.loads(body)
    assert isinstance(value, dict)
    return value


async def start(nursery: trio.Nursery, tmp_path: pathlib.Path, **extra: object) -> RunningBroker:
    config = make_config(tmp_path / "store", metrics_listen="127.0.0.1:0", **extra)
    return await start_broker(nursery, config)


def http_port(broker: RunningBroker) -> int:
    assert broker.server.http_port is not None
    return broker.server.http_port
