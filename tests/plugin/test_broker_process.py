"""`BrokerProcess` and its options, outside pytest's fixtures: what reaches the broker, and the
clear errors of a broker that cannot run, exits or never listens."""

from __future__ import annotations

import pathlib
import socket
import ssl
import subprocess
import sys
import tempfile
from functools import partial
from typing import Any

import pytest
import trio

from rmq_client import Message, SendError, SessionCredentials, open_producer
from rmq_client.broker_process import (
    BrokerOptions,
    BrokerProcess,
    BrokerStartError,
    TlsFiles,
    default_executable,
    parse_executable,
)


def test_options_become_rmq_variables_and_the_callers_own_are_dropped() -> None:
    options = BrokerOptions(
        flush_disk_type="SYNC_FLUSH",
        acl_file=pathlib.Path("/etc/acl.yml"),
        tls=TlsFiles(pathlib.Path("/c.pem"), pathlib.Path("/k.pem"), ca=pathlib.Path("/ca.pem")),
        config={"max_index_num": 10, "trace_on": False},
    )
    env = options.environment({"PATH": "/bin", "RMQ_LISTEN": "0.0.0.0:10911", "RMQ_CONFIG": "x"})
    assert env["PATH"] == "/bin"
    assert "RMQ_LISTEN" not in env and "RMQ_CONFIG" not in env
    assert env["RMQ_ACL_ENABLE"] == "true" and env["RMQ_ACL_FILE"] == "/etc/acl.yml"
    assert env["RMQ_TLS_MODE"] == "enforcing"
    assert (env["RMQ_TLS_SERVER_CERT"], env["RMQ_TLS_SERVER_KEY"]) == ("/c.pem", "/k.pem")
    assert env["RMQ_TLS_SERVER_CA"] == "/ca.pem"
    assert env["RMQ_TLS_SERVER_NEED_CLIENT_AUTH"] == "none"
    # `config` wins over the test defaults; booleans are spelt as the broker parses them
    assert env["RMQ_MAX_INDEX_NUM"] == "10" and env["RMQ_TRACE_ON"] == "false"
    assert env["RMQ_MAPPED_FILE_SIZE_COMMIT_LOG"] == str(64 << 20)


def test_executable_words() -> None:
    assert parse_executable("python3 -m broker") == ["python3", "-m", "broker"]
    assert parse_executable(["/opt/rmq broker"]) == ["/opt/rmq broker"]
    assert parse_executable(None) == default_executable()
    with pytest.raises(ValueError, match="empty"):
        parse_executable("  ")


def test_a_missing_executable_is_a_start_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(BrokerStartError, match=r"cannot run .*no-such-broker"):
        BrokerProcess(store_dir=tmp_path, executable=[str(tmp_path / "no-such-broker")])


def test_a_broker_that_never_listens_is_killed_and_reported_with_its_output(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where its own store goes
    # A stand-in that prints a line and then hangs: the arguments after -c are ignored.
    code = "import os, time; print('warming up', os.getpid(), flush=True); time.sleep(600)"
    with pytest.raises(BrokerStartError, match=r"did not listen within 0\.5 s:\nwarming up") as e:
        BrokerProcess(executable=[sys.executable, "-c", code], start_timeout_s=0.5)
    pid = str(e.value).split()[-1]
    assert not pathlib.Path(f"/proc/{pid}").exists()  # killed and reaped
    assert list(tmp_path.iterdir()) == []  # and its temporary store removed


def test_stop_restart_and_close(tmp_path: pathlib.Path) -> None:
    broker = BrokerProcess(store_dir=tmp_path / "store")
    try:
        assert broker.running and broker.address.startswith("127.0.0.1:")
        assert broker.namesrv_addr == broker.address
        address = broker.address
        assert broker.stop() == 0
        assert not broker.running
        assert [e["event"] for e in broker.events()][-1] == "shutdown_complete"
        broker.restart()
        assert broker.running and broker.address == address
        # the logs of both runs, in order
        events = [e["event"] for e in broker.events()]
        assert events.count("listening") == 2
        assert events.index("shutdown_complete") < len(events) - 1
    finally:
        broker.close()
    assert not broker.running
    # a store the caller gave is the caller's: close() leaves it
    assert (tmp_path / "store" / "commitlog").is_dir()


def test_a_restart_on_its_port_needs_no_other_port_of_the_host(tmp_path: pathlib.Path) -> None:
    """A broker restarted on its port while another process holds the port after it (a
    master's HA port defaults to the listen port + 1) starts: test brokers take an HA port of
    the system's choosing."""
    broker = BrokerProcess(store_dir=tmp_path / "store")
    try:
        assert broker.stop() == 0
        neighbour = socket.socket()
        try:
            try:
                neighbour.bind(("127.0.0.1", broker.port + 1))
            except OSError:
                pass  # held by another process already: the restart meets the same case
            else:
                neighbour.listen()
            broker.restart()
            assert broker.running
        finally:
            neighbour.close()
    finally:
        broker.close()


ACL = """
accounts:
  - accessKey: plugin-tester
    secretKey: "tester-secret"
    defaultTopicPerm: PUB
"""


def self_signed(directory: pathlib.Path) -> TlsFiles:
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", "key.pem", "-out", "cert.pem"),
        ],
        cwd=directory,
        check=True,
        capture_output=True,
        timeout=60,
    )
    return TlsFiles(directory / "cert.pem", directory / "key.pem", mode="permissive")


async def send(broker: BrokerProcess, **kwargs: Any) -> str:
    """The send's status, or the remark of its refusal."""
    async with open_producer(broker.host, broker.port, **kwargs) as producer:
        try:
            return (await producer.send(Message("Guarded", b"x"))).status.name
        except SendError as exc:
            return exc.remark or ""


def test_acl_and_tls_options_reach_the_broker(tmp_path: pathlib.Path) -> None:
    (tmp_path / "acl.yml").write_text(ACL)
    tls = self_signed(tmp_path)
    options = BrokerOptions(acl_file=tmp_path / "acl.yml", tls=tls)
    with BrokerProcess(options, store_dir=tmp_path / "store") as broker:
        assert trio.run(send, broker).startswith("No accessKey is configured")
        trusting = ssl.create_default_context(cafile=str(tls.cert))
        signed = SessionCredentials("plugin-tester", "tester-secret")
        assert trio.run(partial(send, broker, ssl_context=trusting, credentials=signed)) == (
            "SEND_OK"
        )


FORGETFUL = """
from rmq_client.broker_process import BrokerProcess

broker = BrokerProcess()
print(broker.pid, broker.store_dir, flush=True)
"""


def test_a_broker_left_running_is_closed_when_the_interpreter_exits() -> None:
    result = subprocess.run(
        [sys.executable, "-c", FORGETFUL], capture_output=True, text=True, timeout=120, check=True
    )
    pid, store_dir = result.stdout.split()
    assert not pathlib.Path(store_dir).exists()
    # gone, or a zombie its parent (that interpreter) never waited for
    stat = pathlib.Path(f"/proc/{pid}/stat")
    assert not stat.exists() or stat.read_text().rpartition(")")[2].split()[0] == "Z"
