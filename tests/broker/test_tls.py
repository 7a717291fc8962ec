"""TLS on the broker port: permissive and enforcing modes, mutual TLS, bad certificates, and
garbage handshakes, all with the client stub over real loopback sockets.

Certificates are made once per module with the `openssl` command line (a CA, a second CA that
nobody trusts, server and client certificates, and expired ones dated 2020).
"""

from __future__ import annotations

import dataclasses
import pathlib
import random
import ssl
import subprocess

import pytest
import trio
from structlog.testing import capture_logs

from broker.config import BrokerConfig, ConfigError
from broker.tls import TlsClientAuth, TlsMode, client_ssl_context
from rmq_client.producer import ConnectionClosedError, Message, SendError, open_producer
from store.reader import CommitLogReader
from tests.conftest import RunningBroker, make_config, start_broker

CA_CONFIG = """
[ ca ]
default_ca = local
[ local ]
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = any
unique_subject = no
copy_extensions = copy
[ any ]
commonName = supplied
[ leaf ]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


@dataclasses.dataclass(frozen=True)
class Certs:
    dir: pathlib.Path

    def __getattr__(self, name: str) -> str:
        return str(self.dir / name)


def _openssl(cwd: pathlib.Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _make_ca(cwd: pathlib.Path, name: str) -> None:
    (cwd / name).mkdir()
    (cwd / name / "index.txt").touch()
    (cwd / name / "serial").write_text("01\n")
    (cwd / name / "ca.cnf").write_text(CA_CONFIG)
    _openssl(
        cwd / name,
        *("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
        *("-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", f"/CN={name}"),
        *("-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
    )


def _make_leaf(cwd: pathlib.Path, ca: str, name: str, *, expired: bool = False) -> None:
    san = "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost"
    _openssl(
        cwd,
        *("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
        *("-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}"),
        *("-addext", san),
    )
    dates = (
        ["-startdate", "20200101000000Z", "-enddate", "20200102000000Z"]
        if expired
        else ["-days", "2"]
    )
    _openssl(
        cwd / ca,
        *("ca", "-batch", "-config", "ca.cnf", "-extensions", "leaf", "-notext"),
        *("-cert", "ca.pem", "-keyfile", "ca.key", "-in", f"../{name}.csr"),
        *("-out", f"../{name}.pem", *dates),
    )


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    root = tmp_path_factory.mktemp("certs")
    _make_ca(root, "ca")
    _make_ca(root, "rogue")
    _make_leaf(root, "ca", "server")
    _make_leaf(root, "ca", "client")
    _make_leaf(root, "ca", "expired_client", expired=True)
    _make_leaf(root, "ca", "expired_server", expired=True)
    _make_leaf(root, "rogue", "rogue_client")
    return Certs(root)


def tls_config(
    tmp_path: pathlib.Path, certs: Certs, mode: str, **overrides: object
) -> BrokerConfig:
    values: dict[str, object] = {
        "tls_mode": mode,
        "tls_server_cert": certs.server + ".pem",
        "tls_server_key": certs.server + ".key",
        "idle_timeout_s": 2.0,
    }
    values.update(overrides)
    return make_config(tmp_path / "store", **values)


def context(certs: Certs, client: str | None = None, ca: str = "ca") -> ssl.SSLContext:
    cert = key = None
    if client is not None:
        cert, key = f"{certs.dir / client}.pem", f"{certs.dir / client}.key"
    return client_ssl_context(str(certs.dir / ca / "ca.pem"), cert, key)


async def sends(port: int, body: bytes, ssl_context: ssl.SSLContext | None = None) -> int:
    with trio.fail_after(10):
        async with open_producer("127.0.0.1", port, ssl_context=ssl_context) as producer:
            return (await producer.send(Message("Secure", body))).queue_offset


async def refused(port: int, ssl_context: ssl.SSLContext | None = None) -> None:
    """The connection (or its handshake) fails: the send never gets an answer."""
    with trio.fail_after(10):
        try:
            async with open_producer("127.0.0.1", port, ssl_context=ssl_context) as producer:
                # With TLS 1.3 the client's handshake ends before the server has checked the
                # client certificate: that refusal arrives as a closed connection.
                with pytest.raises(ConnectionClosedError):
                    await producer.send(Message("Secure", b"must-not-be-stored"))
        except ConnectionClosedError:
            pass  # refused during the handshake


async def stored_bodies(broker: RunningBroker) -> list[bytes]:
    await broker.stop()
    with CommitLogReader(broker.config.store.store_path_root_dir) as reader:
        return [r.body or b"" for r in reader.iter_records(reader.min_offset)]


async def test_permissive_serves_tls_and_plaintext_on_one_port(
    nursery: trio.Nursery, tmp_path: pathlib.Path, certs: Certs
) -> None:
    broker = await start_broker(nursery, tls_config(tmp_path, certs, "permissive"))
    await sends(broker.port, b"over-tls", context(certs))
    await sends(broker.port, b"in-clear")
    await sends(broker.port, b"over-tls-again", context(certs))
    assert await stored_bodies(broker) == [b"over-tls", b"in-clear", b"over-tls-again"]


async def test_enforcing_refuses_plaintext(
    nursery: trio.Nursery, tmp_path: pathlib.Path, certs: Certs
) -> None:
    broker = await start_broker(nursery, tls_config(tmp_path, certs, "enforcing"))
    with capture_logs() as logs:
        await refused(broker.port)
    assert any(e.get("reason") == "plaintext_refused" for e in logs)
    await sends(broker.port, b"over-tls", context(certs))
    assert await stored_bodies(broker) == [b"over-tls"]


async def test_disabled_mode_does_not_speak_tls(
    nursery: trio.Nursery, tmp_path: pathlib.Path, certs: Certs
) -> None:
    broker = await start_broker(nursery, make_config(tmp_path / "store", idle_timeout_s=2.0))
    await refused(broker.port, context(certs))
    await sends(broker.port, b"in-clear")
    assert await stored_bodies(broker) == [b"in-clear"]


async def test_mutual_tls_requires_a_client_certificate_from_the_ca(
    nursery: trio.Nursery, tmp_path: pathlib.Path, certs: Certs
) -> None:
    config = tls_config(
        tmp_path,
        certs,
        "enforcing",
        tls_server_ca=str(certs.dir / "ca" / "ca.pem"),
        tls_server_need_client_auth="require",
    )
    assert config.tls_server_need_client_auth is TlsClientAuth.REQUIRE
    broker = await start_broker(nursery, config)
    with capture_logs() as logs:
        await refused(broker.port, context(certs))  # no certificate
        await refused(broker.port, context(certs, "rogue_client"))  # signed by another CA
        await refused(broker.port, context(certs, "expired_client"))
    failures = [e for e in logs if e["event"] == "tls_refused"]
    assert [e["reason"] for e in failures] == ["handshake_failed"] * 3
    await sends(broker.port, b"mutual", context(certs, "client"))
    assert await stored_bodies(broker) == [b"mutual"]


async def test_client_refuses_an_expired_or_untrusted_server_certificate(
    nursery: trio.Nursery, tmp_path: pathlib.Path, certs: Certs
) -> None:
    expired = tls_config(
        tmp_path,
        certs,
        "enforcing",
        tls_server_cert=certs.expired_server + ".pem",
        tls_server_key=certs.expired_server + ".key",
    )
    broker = await start_broker(nursery, expired)
    with pytest.raises(ConnectionClosedError, match="certificate has expired"):
        await sends(broker.port, b"x", context(certs))
    await broker.stop()
    broker = await start_broker(nursery, tls_config(tmp_path / "b", certs, "enforcing"))
    with pytest.raises(ConnectionClosedError, match="certificate verify failed"):
        await sends(broker.port, b"x", context(certs, ca="rogue"))
    await sends(broker.port, b"trusted", context(certs))
    assert await stored_bodies(broker) == [b"trusted"]


async def test_acl_and_tls_together(
    nursery: trio.Nursery, tmp_path: pathlib.Path, certs: Certs
) -> None:
    from protocol.acl_signing import SessionCredentials

    acl = tmp_path / "acl.yml"
    acl.write_text("accounts: [{accessKey: tlsuser1, secretKey: tlssecret, defaultTopicPerm: PUB}]")
    config = tls_config(tmp_path, certs, "enforcing", acl_enable=True, acl_file=str(acl))
    broker = await start_broker(nursery, config)
    good = SessionCredentials("tlsuser1", "tlssecret")
    async with open_producer(
        "127.0.0.1", broker.port, ssl_context=context(certs), credentials=good
    ) as producer:
        await producer.send(Message("Secure", b"signed-over-tls"))
    async with open_producer("127.0.0.1", broker.port, ssl_context=context(certs)) as producer:
        with pytest.raises(SendError, match="No accessKey"):
            await producer.send(Message("Secure", b"unsigned"))
    assert await stored_bodies(broker) == [b"signed-over-tls"]


async def _garbage_peer(port: int, payload: bytes) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        try:
            await stream.send_all(payload)
            with trio.move_on_after(3):
                while await stream.receive_some(65536):
                    pass
        except trio.BrokenResourceError:
            pass  # the broker hung up on us: what it should do


def _handshake_payloads(seed: int, count: int) -> list[bytes]:
    rng = random.Random(seed)
    payloads = [
        b"\x16",  # a record header cut after one byte, then silence
        b"\x16\x03\x01\x00\x05hello",  # a handshake record whose content is not a ClientHello
        b"\x16\x03\x03\xff\xff" + bytes(100),  # an oversized record length
        b"\x00\x00\x00\x10garbage-frame...",  # plaintext garbage
    ]
    for _ in range(count):
        size = rng.randrange(1, 600)
        payloads.append(b"\x16\x03" + bytes(rng.randrange(256) for _ in range(size)))
    return payloads


@pytest.mark.parametrize("mode", ["permissive", "enforcing"])
async def test_garbage_handshakes_never_hurt_the_broker(
    nursery: trio.Nursery, tmp_path: pathlib.Path, certs: Certs, mode: str
) -> None:
    broker = await start_broker(nursery, tls_config(tmp_path, certs, mode, idle_timeout_s=1.0))
    payloads = _handshake_payloads(seed=len(mode), count=40)
    with trio.fail_after(30), capture_logs() as logs:
        async with trio.open_nursery() as peers:
            for payload in payloads:
                peers.start_soon(_garbage_peer, broker.port, payload)
        await sends(broker.port, b"still-serving", context(certs))
    assert not [e for e in logs if e["event"] == "connection_failed"]
    handshakes = sum(1 for p in payloads if p[0] == 0x16)
    assert sum(1 for e in logs if e["event"] == "tls_refused") >= handshakes
    with capture_logs() as stopping:
        assert await stored_bodies(broker) == [b"still-serving"]
    assert not [e for e in stopping if e["event"] == "shutdown_deadline_passed"]


def test_tls_settings_are_checked(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match="tls_server_cert"):
        make_config(tmp_path, tls_mode="enforcing")
    with pytest.raises(ConfigError, match="tls_server_ca"):
        make_config(tmp_path, tls_server_need_client_auth="require")
    with pytest.raises(ConfigError, match="tls_mode"):
        make_config(tmp_path, tls_mode="sometimes")
    config = make_config(tmp_path, tls_mode="PERMISSIVE", tls_server_cert="c", tls_server_key="k")
    assert config.tls_mode is TlsMode.PERMISSIVE
    assert "hunter22" not in repr(make_config(tmp_path, tls_server_key_password="hunter22"))
