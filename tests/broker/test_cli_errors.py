"""Operator commands given bad input or a broken target: one line on stderr, nonzero exit."""

from __future__ import annotations

import json
import pathlib
import socket
import subprocess

import pytest

from store.layout import MAGIC_POS, MESSAGE_MAGIC_CODE
from store.reader import CommitLogReader
from tests.daemon import run_cli
from tests.pipeline import stores


def free_port() -> int:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def one_error_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    "namesrv", [f"127.0.0.1:{free_port()}", "no-such-host.invalid:9876"], ids=["closed", "dns"]
)
def test_send_to_an_unreachable_broker_is_one_line(namesrv: str) -> None:
    result = run_cli("send", "--namesrv", namesrv, "--topic", "T", "--timeout", "3")
    line = one_error_line(result, 1)
    assert line.startswith(f"rmq-broker: send: cannot reach {namesrv}: ")


@pytest.mark.parametrize(
    "args",
    [
        ("send", "--namesrv", "127.0.0.1:1", "--topic", "T", "--size", "10000000000"),
        ("health", "--addr", "127.0.0.1:1", "--timeout", "nan"),
        ("health", "--addr", "127.0.0.1:1", "--timeout", "-1"),
    ],
)
def test_out_of_range_options_are_usage_errors(args: tuple[str, ...]) -> None:
    result = run_cli(*args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr


def test_inspect_refuses_a_directory_that_is_not_a_store(tmp_path: pathlib.Path) -> None:
    line = one_error_line(run_cli("inspect", "--store-dir", str(tmp_path)), 1)
    assert line == f"rmq-broker: inspect: {tmp_path} is not a store (no commitlog directory)"
    (tmp_path / "commitlog").write_bytes(b"")
    line = one_error_line(run_cli("inspect", "--store-dir", str(tmp_path)), 1)
    assert line == f"rmq-broker: inspect: {tmp_path} is not a store (no commitlog directory)"


def test_inspect_stops_at_a_damaged_record_naming_it(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    puts = stores.append_sync(str(root), [stores.message(i) for i in range(5)])
    with CommitLogReader(str(root)) as reader:
        base = reader.min_offset
    damaged = sorted(put.offset for put in puts)[2]
    segment = root / "commitlog" / f"{base:020d}"
    with segment.open("r+b") as fh:  # break the magic code of the third record
        fh.seek(damaged - base + MAGIC_POS)
        fh.write((MESSAGE_MAGIC_CODE ^ 0xFF).to_bytes(4, "big", signed=True))
    result = run_cli("inspect", "--store-dir", str(root))
    offsets = [json.loads(line)["physical_offset"] for line in result.stdout.splitlines()]
    assert offsets == sorted(put.offset for put in puts)[:2]
    line = one_error_line(result, 1)
    assert line.startswith(f"rmq-broker: inspect: damaged record at offset {damaged}: ")


@pytest.mark.parametrize("key", ["listen", "namesrv_listen", "metrics_listen"])
def test_a_port_in_use_names_the_listener(key: str, tmp_path: pathlib.Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = f"127.0.0.1:{taken.getsockname()[1]}"
        flags = {"listen": "127.0.0.1:0", "namesrv_listen": "127.0.0.1:0"}
        flags["metrics_listen"] = "127.0.0.1:0"
        flags[key] = busy
        args = [f"--{name.replace('_', '-')}={value}" for name, value in flags.items()]
        result = run_cli("serve", "--store-dir", str(tmp_path / "store"), *args)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    # metrics_listen is bound once the store is open, after the startup events
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"rmq-broker: cannot start: {key} {busy}: "), last


def test_a_bad_namesrv_addr_flag_is_one_line(tmp_path: pathlib.Path) -> None:
    result = run_cli("serve", "--store-dir", str(tmp_path / "store"), "-n", "10.0.0.1:9876;nohost")
    line = one_error_line(result, 2)
    assert line == "rmq-broker: configuration error: namesrv_addr: expected HOST:PORT, got 'nohost'"


def test_a_busy_ha_port_next_to_the_listen_port_is_named(tmp_path: pathlib.Path) -> None:
    """A master's HA port defaults to the listen port + 1: when that one is taken, the line
    says which key decides it, not only that some address is in use. (The port below the taken
    one is free when probed; another process may take it before the broker binds it, and then
    the scenario is tried again on other ports.)"""
    key = "ha_listen_port (unset: the listen port + 1)"
    for _attempt in range(10):
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1] - 1
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue  # the port below is in use: other ports
            result = run_cli(
                "serve", "--store-dir", str(tmp_path / "store"), f"--listen=127.0.0.1:{port}"
            )
        last = result.stderr.strip().splitlines()[-1]
        if not last.startswith(f"rmq-broker: cannot start: listen 127.0.0.1:{port}: "):
            break
    assert result.returncode == 1, result.stderr
    assert last.startswith(f"rmq-broker: cannot start: {key} 127.0.0.1:{port + 1}: "), last
