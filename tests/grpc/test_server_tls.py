"""The gRPC port under the remoting port's TLS settings: enforcing, permissive, mutual TLS,
ALPN "h2"; and the connection budget it shares with the remoting port."""

from __future__ import annotations

import pathlib
import ssl
from typing import Any

import grpc
import pytest
import trio

from tests.broker.test_tls import Certs, _make_ca, _make_leaf
from tests.conftest import make_config, start_broker
from tests.daemon import Daemon
from tests.grpc.raw_h2 import RawClient, frame, grpc_headers
from tests.grpc.server_harness import resource_type, start_server, unary
from tests.grpc.test_server_broker import official_client


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A CA, and server and client certificates it signed (as the remoting TLS tests make)."""
    root = tmp_path_factory.mktemp("certs")
    _make_ca(root, "ca")
    _make_leaf(root, "ca", "server")
    _make_leaf(root, "ca", "client")
    return Certs(root)


def _tls_config(tmp_path: pathlib.Path, certs: Certs, mode: str, **more: object) -> Any:
    return make_config(
        tmp_path / "store",
        tls_mode=mode,
        tls_server_cert=certs.server + ".pem",
        tls_server_key=certs.server + ".key",
        **more,
    )


def _credentials(certs: Certs, client: str | None = None) -> grpc.ChannelCredentials:
    root = (certs.dir / "ca" / "ca.pem").read_bytes()
    if client is None:
        return grpc.ssl_channel_credentials(root)
    key = (certs.dir / f"{client}.key").read_bytes()
    chain = (certs.dir / f"{client}.pem").read_bytes()
    return grpc.ssl_channel_credentials(root, key, chain)


def _secure_call(port: int, credentials: grpc.ChannelCredentials) -> Any:
    options = [("grpc.ssl_target_name_override", "localhost")]
    with grpc.secure_channel(f"127.0.0.1:{port}", credentials, options) as channel:
        try:
            return unary(channel, "Unary")(resource_type()(name="over tls"), timeout=20)
        except grpc.RpcError as exc:
            return exc


def _plain_call(port: int) -> Any:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            return unary(channel, "Unary")(resource_type()(name="plain"), timeout=20)
        except grpc.RpcError as exc:
            return exc


async def test_enforcing_serves_tls_with_alpn_h2_and_refuses_plaintext(
    nursery: trio.Nursery, tmp_path: pathlib.Path, certs: Certs
) -> None:
    running = await start_server(nursery, _tls_config(tmp_path, certs, "enforcing"))
    answer = await trio.to_thread.run_sync(_secure_call, running.port, _credentials(certs))
    assert answer.name == "over tls"
    assert running.probe.contexts[-1].tls
    plain = await trio.to_thread.run_sync(_plain_call, running.port)
    assert plain.code() == grpc.StatusCode.UNAVAILABLE
    context = ssl.create_default_context(cafile=str(certs.dir / "ca" / "ca.pem"))
    context.set_alpn_protocols(["h2", "http/1.1"])
    stream = await trio.open_ssl_over_tcp_stream(
        "127.0.0.1", running.port, ssl_context=context, https_compatible=True
    )
    await stream.do_handshake()
    assert stream.selected_alpn_protocol() == "h2"
    await stream.aclose()
    await running.stop()


async def test_permissive_serves_both(
    nursery: trio.Nursery, tmp_path: pathlib.Path, certs: Certs
) -> None:
    running = await start_server(nursery, _tls_config(tmp_path, certs, "permissive"))
    answer = await trio.to_thread.run_sync(_secure_call, running.port, _credentials(certs))
    assert answer.name == "over tls"
    plain = await trio.to_thread.run_sync(_plain_call, running.port)
    assert plain.name == "plain"
    assert [c.tls for c in running.probe.contexts] == [True, False]
    await running.stop()


async def test_mutual_tls_needs_a_client_certificate(
    nursery: trio.Nursery, tmp_path: pathlib.Path, certs: Certs
) -> None:
    config = _tls_config(
        tmp_path,
        certs,
        "enforcing",
        tls_server_ca=str(certs.dir / "ca" / "ca.pem"),
        tls_server_need_client_auth="require",
    )
    running = await start_server(nursery, config)
    anonymous = await trio.to_thread.run_sync(_secure_call, running.port, _credentials(certs))
    assert anonymous.code() == grpc.StatusCode.UNAVAILABLE
    signed = await trio.to_thread.run_sync(
        _secure_call, running.port, _credentials(certs, "client")
    )
    assert signed.name == "over tls"
    await running.stop()


async def test_grpc_connections_count_against_max_connections(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    config = make_config(tmp_path / "store", grpc_listen="127.0.0.1:0", max_connections=2)
    broker = await start_broker(nursery, config)
    grpc_port = broker.server.grpc_port
    assert grpc_port is not None
    first = await RawClient.open(grpc_port)
    second = await RawClient.open(grpc_port)
    # both accepted: each is answered (UNIMPLEMENTED: the service has no methods yet)
    for client in (first, second):
        answer = await client.answer(await client.request(grpc_headers(), frame(b"")))
        assert answer.status == "12"
    third = await RawClient.open(grpc_port)
    await third.until_closed()
    assert broker.server.grpc is not None
    assert broker.server.grpc.refused_connections == 1
    # the remoting port shares the budget: full too
    remoting = await trio.open_tcp_stream("127.0.0.1", broker.port)
    with trio.fail_after(10):
        assert await remoting.receive_some(10) == b""
    assert broker.server.refused_connections == 1
    for client in (first, second, third):
        await client.aclose()
    await remoting.aclose()
    await broker.stop()


def test_official_client_over_tls(tmp_path: pathlib.Path, certs: Certs) -> None:
    env = {
        "RMQ_GRPC_LISTEN": "127.0.0.1:0",
        "RMQ_TLS_MODE": "enforcing",
        "RMQ_TLS_SERVER_CERT": certs.server + ".pem",
        "RMQ_TLS_SERVER_KEY": certs.server + ".key",
    }
    daemon = Daemon(tmp_path / "store", env=env)
    try:
        grpc_port = int(str(daemon.event("listening")["grpc_port"]))
        ca = str(certs.dir / "ca" / "ca.pem")
        result = official_client(f"127.0.0.1:{grpc_port}", "TopicT", ca=ca)
        assert result["query_route"] == "OK"  # through TLS
        assert result["send"] == "ok"
        assert daemon.count("tls_refused") == 0
    finally:
        assert daemon.stop() == 0
