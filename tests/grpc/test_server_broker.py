"""The gRPC endpoint in a real `rmq-broker serve`: its port reported at startup, the official
RocketMQ 5 client served (a method the service lacks answered UNIMPLEMENTED, never a hang),
`grpc_listen none` opening nothing, and a graceful stop with a client connected."""

from __future__ import annotations

import pathlib
import socket
import subprocess
import sys

import grpc
import pytest

from rmq_client import BrokerOptions, BrokerProcess
from tests.daemon import Daemon
from tests.grpc.official import run_script

ROOT = pathlib.Path(__file__).resolve().parents[2]


def official_client(endpoint: str, topic: str, ca: str | None = None) -> dict[str, object]:
    """What the official client's script saw; over TLS trusting `ca` when it is given."""
    env = {} if ca is None else {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": ca}
    tls = ["tls"] if ca else []
    return run_script("client_transport.py", endpoint, topic, *tls, env=env, timeout_s=120)


def test_official_client_sends_through_the_service(tmp_path: pathlib.Path) -> None:
    daemon = Daemon(tmp_path / "store", env={"RMQ_GRPC_LISTEN": "127.0.0.1:0"})
    try:
        listening = daemon.event("listening")
        grpc_port = int(str(listening["grpc_port"]))
        assert grpc_port not in (0, daemon.port)
        result = official_client(f"127.0.0.1:{grpc_port}", "TopicT")
        assert result["query_route"] == "OK"
        assert result["startup"] == "ok"
        assert result["send"] == "ok"
        daemon.drain()
        assert daemon.count("grpc_connection_failed") == 0
    finally:
        assert daemon.stop() == 0


def test_graceful_stop_with_a_connected_client(tmp_path: pathlib.Path) -> None:
    daemon = Daemon(tmp_path / "store", env={"RMQ_GRPC_LISTEN": "127.0.0.1:0"})
    grpc_port = int(str(daemon.event("listening")["grpc_port"]))
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=30)
        code = daemon.stop()
    finally:
        channel.close()
    assert code == 0, daemon.text()
    assert daemon.count("grpc_shutdown") == 1
    assert daemon.count("grpc_shutdown_deadline_passed") == 0
    assert daemon.count("shutdown_complete") == 1


def test_grpc_listen_none_opens_nothing(tmp_path: pathlib.Path) -> None:
    daemon = Daemon(tmp_path / "store", env={"RMQ_GRPC_LISTEN": "none"})
    try:
        listening = daemon.event("listening")
        assert "grpc_port" not in listening
        assert daemon.count("grpc_listening") == 0
        pid = daemon.process.pid
        inodes = _listening_inodes()
        owned = _socket_inodes(pid)
        # the remoting port and the HA port, nothing else
        assert len(owned & inodes) == 2
    finally:
        assert daemon.stop() == 0


def _listening_inodes() -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            next(fh)
            for line in fh:
                fields = line.split()
                if fields[3] == "0A":  # LISTEN
                    inodes.add(fields[9])
    return inodes


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in pathlib.Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = str(fd.readlink())
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def test_default_grpc_port_taken_is_a_clear_startup_error(tmp_path: pathlib.Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        daemon = Daemon(
            tmp_path / "store", env={"RMQ_GRPC_LISTEN": f"127.0.0.1:{port}"}, wait=False
        )
        code = daemon.finish(60)
    assert code == 1
    assert "grpc_listen" in daemon.text()


LAZY_SCRIPT = """
import pathlib, sys, tempfile, trio
from tests.conftest import make_config, start_broker

HEAVY = ("h2", "hpack", "google.protobuf")
PREFACE = b"PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])

async def main():
    with tempfile.TemporaryDirectory() as store:
        async with trio.open_nursery() as nursery:
            config = make_config(pathlib.Path(store), grpc_listen="127.0.0.1:0")
            broker = await start_broker(nursery, config)
            before = [m for m in HEAVY if m in sys.modules]
            stream = await trio.open_tcp_stream("127.0.0.1", broker.server.grpc_port)
            await stream.send_all(PREFACE)
            await stream.receive_some(100)  # the server's SETTINGS
            after = [m for m in HEAVY if m in sys.modules]
            print("MODULES", before, after)
            await stream.aclose()
            await broker.stop()

trio.run(main)
"""


def test_h2_and_protobuf_are_imported_at_the_first_grpc_connection() -> None:
    done = subprocess.run(
        [sys.executable, "-c", LAZY_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("MODULES"))
    assert line == "MODULES [] ['h2', 'hpack', 'google.protobuf']"


def test_broker_process_reports_its_grpc_port(tmp_path: pathlib.Path) -> None:
    options = BrokerOptions(config={"grpc_listen": "127.0.0.1:0"})
    with BrokerProcess(options, store_dir=tmp_path / "on") as broker:
        assert broker.grpc_port not in (None, 0, broker.port)
        with grpc.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
            call = channel.unary_unary("/apache.rocketmq.v2.MessagingService/RecallMessage")
            with pytest.raises(grpc.RpcError) as info:
                call(b"", timeout=30)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with BrokerProcess(store_dir=tmp_path / "off") as quiet:
        assert quiet.grpc_port is None  # test brokers open no gRPC port unless asked
