"""A real `rmq-broker namesrv` process, driven over TCP with raw remoting frames.

Two fake brokers register on connections of their own, as 4.9 brokers do; one keeps
registering, the other falls silent and must leave the routes once the (shortened) expiry
has passed, while the first stays. The KV config must survive a restart of the process, and a
KV file that cannot be read must stop the start with one line instead of being overwritten.
"""

from __future__ import annotations

import json
import pathlib
import socket

import trio

from protocol.admin_topic import DataVersion, TopicConfigData
from protocol.codes import RequestCode, ResponseCode
from protocol.route import ClusterInfo, TopicRouteData
from tests.namesrv.fake_broker import (
    NamesrvConnection,
    connect,
    register_request,
    request,
    route_request,
    unregister_request,
)
from tests.namesrv.process import NamesrvProcess, namesrv_refused, run_namesrv

A = "127.0.0.1:10911"
B = "127.0.0.1:20911"
TOPIC = TopicConfigData("Shared", 4, 4, 6)


async def brokers_of(conn: NamesrvConnection, topic: str) -> list[str]:
    answer = await conn.call(route_request(topic))
    if answer.code == ResponseCode.TOPIC_NOT_EXIST:
        return []
    assert answer.code == ResponseCode.SUCCESS and answer.body is not None, answer.remark
    return [d.broker_name for d in TopicRouteData.from_json(answer.body).broker_datas]


async def keep_registering(conn: NamesrvConnection, addr: str, name: str) -> None:
    while True:
        answer = await conn.call(register_request(addr, name, (TOPIC,), compressed=True))
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        await trio.sleep(0.3)


async def test_routes_expiry_and_unregistration_against_a_real_process(
    tmp_path: pathlib.Path,
) -> None:
    server = NamesrvProcess(
        tmp_path / "kvConfig.json", "--broker-expired-s", "2", "--scan-interval-s", "0.25"
    )
    try:
        await _routes_expiry_and_unregistration(server)
    finally:
        assert server.stop() == 0
    expired = [e for e in server.events if e.get("event") == "broker_expired"]
    assert [e["broker_addr"] for e in expired] == [A]


async def _routes_expiry_and_unregistration(server: NamesrvProcess) -> None:
    with trio.fail_after(60):
        async with (
            connect(server.port) as broker_a,
            connect(server.port) as broker_b,
            connect(server.port) as client,
        ):
            only_a = TopicConfigData("OnlyA", 2, 2, 6)
            answer = await broker_a.call(register_request(A, "broker-a", (TOPIC, only_a)))
            assert answer.code == ResponseCode.SUCCESS
            async with trio.open_nursery() as nursery:
                nursery.start_soon(keep_registering, broker_b, B, "broker-b")
                await _expiry(broker_a, client)
                nursery.cancel_scope.cancel()
            assert (await client.call(unregister_request(B, "broker-b"))).code == 0
            assert await brokers_of(client, "Shared") == ["broker-a"]
        # broker-a's connection closed: it left with it (4.9's onChannelDestroy).
        async with connect(server.port) as conn:
            assert await brokers_of(conn, "Shared") == []


async def _expiry(broker_a: NamesrvConnection, client: NamesrvConnection) -> None:
    # polling the server over the wire: nothing here to wait on
    while await brokers_of(client, "Shared") != ["broker-a", "broker-b"]:  # noqa: ASYNC110
        await trio.sleep(0.05)
    info = await client.call(request(RequestCode.GET_BROKER_CLUSTER_INFO))
    assert ClusterInfo.from_json(info.body or b"").cluster_addr_table == {
        "DefaultCluster": ["broker-a", "broker-b"]
    }
    # broker-a falls silent, its connection open: the expiry takes it out.
    while await brokers_of(client, "Shared") != ["broker-b"]:  # noqa: ASYNC110
        await trio.sleep(0.1)
    assert await brokers_of(client, "OnlyA") == []
    # Registering again brings it back, with the topics it lists now.
    version = DataVersion(2, 2)
    await broker_a.call(register_request(A, "broker-a", (TOPIC,), version=version))
    assert await brokers_of(client, "Shared") == ["broker-a", "broker-b"]


async def test_kv_config_survives_a_restart(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "namesrv" / "kvConfig.json"
    put = {"namespace": "ORDER_TOPIC_CONFIG", "key": "Shared", "value": "broker-a:4;broker-b:4"}
    key = {"namespace": "ORDER_TOPIC_CONFIG", "key": "Shared"}
    first = NamesrvProcess(path)
    try:
        async with connect(first.port) as conn:
            assert (await conn.call(request(RequestCode.PUT_KV_CONFIG, put))).code == 0
            other = {"namespace": "N2", "key": "k", "value": "v"}
            assert (await conn.call(request(RequestCode.PUT_KV_CONFIG, other))).code == 0
    finally:
        assert first.stop() == 0
    second = NamesrvProcess(path)
    try:
        async with connect(second.port) as conn:
            answer = await conn.call(request(RequestCode.GET_KV_CONFIG, key))
            assert answer.ext_fields == {"value": "broker-a:4;broker-b:4"}
            listed = await conn.call(
                request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "N2"})
            )
            assert json.loads(listed.body or b"") == {"table": {"k": "v"}}
            assert (await conn.call(request(RequestCode.DELETE_KV_CONFIG, key))).code == 0
    finally:
        assert second.stop() == 0
    third = NamesrvProcess(path)
    try:
        async with connect(third.port) as conn:
            answer = await conn.call(request(RequestCode.GET_KV_CONFIG, key))
            assert answer.code == ResponseCode.QUERY_NOT_FOUND
    finally:
        assert third.stop() == 0


def test_an_unreadable_kv_file_stops_the_start_and_is_left_alone(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "kvConfig.json"
    path.write_text('{"configTable":{"N":{"k":1}}}')
    result = namesrv_refused(path)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"rmq-broker: configuration error: {path}: namespace 'N' is not a table of strings"
    )
    assert path.read_text() == '{"configTable":{"N":{"k":1}}}'


def test_a_busy_port_and_a_bad_flag_are_one_line_each(tmp_path: pathlib.Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = run_namesrv(
            "--listen", f"127.0.0.1:{port}", "--kv-config-path", str(tmp_path / "kv")
        )
    assert busy.returncode == 1
    assert busy.stderr.splitlines()[-1].startswith("rmq-broker: cannot start: ")
    assert "Traceback" not in busy.stderr
    bad = run_namesrv("--listen", "nowhere")
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "rmq-broker: configuration error: --listen: expected HOST:PORT, got 'nowhere'"
    )


async def test_a_refused_request_is_one_log_event(tmp_path: pathlib.Path) -> None:
    server = NamesrvProcess(tmp_path / "kvConfig.json")
    try:
        async with connect(server.port) as conn:
            bad = register_request(A, "broker-a", (TOPIC,))
            bad.ext_fields["bodyCrc32"] = "1"
            answer = await conn.call(bad)
            assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
            with trio.fail_after(30):
                refused = await trio.to_thread.run_sync(server.wait_for, "request_refused")
    finally:
        assert server.stop() == 0
    assert refused["request"] == "REGISTER_BROKER"
    assert refused["response"] == "SYSTEM_ERROR"
    assert refused["remark"] == "crc32 not match"
