"""A broker's registration with name servers (`broker.registration`), both in this process over
real loopback sockets: the name server's tables show what the broker sent.

The period is long here (60 s), so a registration that shows up within a test came from the
start or from a topic change, not from the timer.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import trio

from broker.topic_config import TopicConfig
from namesrv.config import NamesrvConfig
from namesrv.server import NamesrvServer, serve
from protocol.admin_topic import TopicConfigData
from protocol.codes import RequestCode, ResponseCode
from protocol.route import ClusterInfo, TopicRouteData
from tests.conftest import make_config, start_broker
from tests.namesrv.fake_broker import connect, register_request, request, route_request


async def start_namesrv(nursery: trio.Nursery, tmp_path: pathlib.Path, name: str) -> NamesrvServer:
    config = NamesrvConfig(
        listen_host="127.0.0.1", listen_port=0, kv_config_path=str(tmp_path / name / "kv.json")
    )
    server: NamesrvServer = await nursery.start(serve, config)
    return server


async def wait_until(check: Callable[[], bool], timeout_s: float = 20) -> None:
    """Poll a table of the other side (no event to wait on: the name server's own state)."""
    with trio.fail_after(timeout_s):
        while not check():  # noqa: ASYNC110
            await trio.sleep(0.02)


async def test_registers_at_start_and_on_topic_changes_and_leaves_on_shutdown(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    namesrv = await start_namesrv(nursery, tmp_path, "ns")
    config = make_config(
        tmp_path / "store",
        namesrv_addr=f"127.0.0.1:{namesrv.port}",
        broker_name="broker-q",
        broker_cluster_name="ClusterQ",
        register_name_server_period=60_000,
    )
    broker = await start_broker(nursery, config)
    addr = broker.server.broker.addr
    routes = namesrv.routes
    await wait_until(lambda: addr in routes.broker_live_table)
    assert routes.cluster_addr_table == {"ClusterQ": {"broker-q"}}
    assert routes.topic_queue_table["TBW102"]["broker-q"].perm == 7  # the template, inheritable

    topics = broker.server.broker.topics
    topics.put(TopicConfig("MadeByAdmin", 3, 3))
    await wait_until(lambda: "MadeByAdmin" in routes.topic_queue_table)
    assert routes.topic_queue_table["MadeByAdmin"]["broker-q"].write_queue_nums == 3
    topics.put(TopicConfig("MadeByAdmin", 5, 5))
    await wait_until(
        lambda: routes.topic_queue_table["MadeByAdmin"]["broker-q"].write_queue_nums == 5
    )
    live = routes.broker_live_table[addr]
    assert live.data_version.counter == topics.data_version.counter

    await broker.stop()
    assert addr not in routes.broker_live_table  # unregistered, not left to expire
    assert "MadeByAdmin" not in routes.topic_queue_table
    namesrv.shutdown()


async def test_a_name_server_that_never_answers_holds_up_neither_broker_nor_others(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    """A peer that accepts and reads but never answers: its link times out and retries; the
    real name server gets the registration and every topic change meanwhile."""
    silent = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    silent_port = silent.socket.getsockname()[1]

    async def swallow() -> None:
        async with silent:  # closed when the test's nursery is cancelled
            while True:
                stream = await silent.accept()
                nursery.start_soon(_read_forever, stream)

    nursery.start_soon(swallow)
    namesrv = await start_namesrv(nursery, tmp_path, "ns")
    config = make_config(
        tmp_path / "store",
        namesrv_addr=f"127.0.0.1:{silent_port};127.0.0.1:{namesrv.port}",
        register_name_server_period=60_000,
        register_broker_timeout_mills=300,
    )
    broker = await start_broker(nursery, config)
    routes = namesrv.routes
    await wait_until(lambda: broker.server.broker.addr in routes.broker_live_table)
    broker.server.broker.topics.put(TopicConfig("WhileOneIsSilent", 2, 2))
    await wait_until(lambda: "WhileOneIsSilent" in routes.topic_queue_table)
    registration = broker.server.registration
    assert registration is not None
    silent_link, real_link = registration.links
    await wait_until(lambda: silent_link.state == "down")
    assert real_link.state == "up"
    with trio.fail_after(10):  # the silent one's unregistration is given up, not waited for
        await broker.stop()
    namesrv.shutdown()


async def _read_forever(stream: trio.SocketStream) -> None:
    async with stream:
        while await stream.receive_some(65536):
            pass


async def test_another_broker_registers_with_the_embedded_role_unless_acl_is_on(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    """REGISTER_BROKER on a broker's own port: its routes and cluster info then include the
    peer; with ACL on, an unsigned one is refused NO_PERMISSION and changes nothing."""
    plain = await start_broker(nursery, make_config(tmp_path / "plain"))
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(
        "accounts:\n  - accessKey: operator1\n    secretKey: operator-secret\n    admin: true\n"
    )
    guarded = await start_broker(
        nursery, make_config(tmp_path / "acl", acl_enable=True, acl_file=str(acl_file))
    )
    peer = register_request("127.0.0.1:1", "broker-peer", (TopicConfigData("Shared", 2, 2, 6),))
    async with connect(plain.port) as conn:
        answer = await conn.call(peer)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        route = await conn.call(route_request("Shared"))
        assert route.code == ResponseCode.SUCCESS  # the peer's topic, which this broker lacks
        data = TopicRouteData.from_json(route.body or b"{}")
        assert [(q.broker_name, q.write_queue_nums) for q in data.queue_datas] == [
            ("broker-peer", 2)
        ]
        info = await conn.call(request(RequestCode.GET_BROKER_CLUSTER_INFO))
        clusters = ClusterInfo.from_json(info.body or b"{}").cluster_addr_table
        assert clusters == {"DefaultCluster": ["broker-a", "broker-peer"]}
    async with connect(guarded.port) as conn:
        answer = await conn.call(register_request("127.0.0.1:1", "broker-peer"))
        assert answer.code == ResponseCode.NO_PERMISSION, answer.remark
        assert not guarded.server.broker.peers.routes.broker_live_table
    await plain.stop()
    await guarded.stop()


async def test_a_name_server_that_restarts_gets_the_broker_back(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    """The restarted name server knows nothing; the broker notices the closed connection at
    once, reconnects with backoff and registers again, long before its period (60 s)."""
    first = await start_namesrv(nursery, tmp_path, "ns")
    port = first.port
    config = make_config(
        tmp_path / "store", namesrv_addr=f"127.0.0.1:{port}", register_name_server_period=60_000
    )
    broker = await start_broker(nursery, config)
    registration = broker.server.registration
    assert registration is not None
    (link,) = registration.links
    await wait_until(lambda: link.state == "up")
    first.shutdown()
    await wait_until(lambda: link.state == "down")
    again = NamesrvConfig(
        listen_host="127.0.0.1", listen_port=port, kv_config_path=str(tmp_path / "kv2.json")
    )
    second: NamesrvServer = await nursery.start(serve, again)
    await wait_until(lambda: broker.server.broker.addr in second.routes.broker_live_table)
    assert link.state == "up" and link.registrations == 2
    await broker.stop()
    second.shutdown()
