"""Every request the name server answers, over a real TCP socket to an in-process server.

Codes and remarks are 4.9's (`DefaultRequestProcessor`). The bad-input tests check the other
half of each answer: the table is as it was, so one peer's bad registration cannot take a
broker's routes away from everybody else.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import trio

from namesrv.config import NamesrvConfig
from namesrv.server import NamesrvServer
from protocol.admin_topic import DataVersion, TopicConfigData, TopicList, parse_properties
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import encode_frame
from protocol.route import ClusterInfo, TopicRouteData
from tests.namesrv.conftest import start_namesrv, with_changes
from tests.namesrv.fake_broker import (
    NamesrvConnection,
    connect,
    register_request,
    request,
    route_request,
    unregister_request,
)

A = "127.0.0.1:10911"
A_SLAVE = "127.0.0.1:10921"
B = "127.0.0.1:20911"
T4 = TopicConfigData("TopicT", 4, 4, 6)
FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


async def route_of(conn: NamesrvConnection, topic: str) -> TopicRouteData:
    response = await conn.call(route_request(topic))
    assert response.code == ResponseCode.SUCCESS, response.remark
    assert response.body is not None
    return TopicRouteData.from_json(response.body)


async def test_two_brokers_one_route_and_cluster_info(namesrv: NamesrvServer) -> None:
    async with connect(namesrv.port) as a, connect(namesrv.port) as b:
        answer = await a.call(register_request(A, "broker-a", (T4,), compressed=True))
        assert (answer.code, answer.body) == (ResponseCode.SUCCESS, None)
        assert answer.ext_fields == {}  # a master is told no master address
        b_topics = (TopicConfigData("TopicT", 8, 8, 6),)
        assert (await b.call(register_request(B, "broker-b", b_topics))).code == 0
        route = await route_of(a, "TopicT")
        assert [(q.broker_name, q.write_queue_nums) for q in route.queue_datas] == [
            ("broker-a", 4),
            ("broker-b", 8),
        ]
        assert {d.broker_name: d.broker_addrs for d in route.broker_datas} == {
            "broker-a": {0: A},
            "broker-b": {0: B},
        }
        info = await a.call(request(RequestCode.GET_BROKER_CLUSTER_INFO))
        assert info.body is not None
        cluster = ClusterInfo.from_json(info.body)
        assert cluster.cluster_addr_table == {"DefaultCluster": ["broker-a", "broker-b"]}
        topics = await a.call(request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        assert TopicList.from_json(topics.body).topic_list == {"TopicT"}
        by_cluster = await a.call(
            request(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"})
        )
        assert TopicList.from_json(by_cluster.body).topic_list == {"TopicT"}


async def test_slave_is_answered_its_masters_address_and_ha_address(
    namesrv: NamesrvServer,
) -> None:
    async with connect(namesrv.port) as conn:
        await conn.call(register_request(A, "broker-a", (T4,), ha_addr="127.0.0.1:10912"))
        answer = await conn.call(register_request(A_SLAVE, "broker-a", broker_id=1))
        assert answer.ext_fields == {"masterAddr": A, "haServerAddr": "127.0.0.1:10912"}
        route = await route_of(conn, "TopicT")
        assert route.broker_datas[0].broker_addrs == {0: A, 1: A_SLAVE}


async def test_unknown_topic_is_topic_not_exist_with_49s_remark(namesrv: NamesrvServer) -> None:
    async with connect(namesrv.port) as conn:
        answer = await conn.call(route_request("Nope"))
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    assert answer.remark == f"No topic route info in name server for the topic: Nope{FAQ}"


async def test_unregister_removes_the_brokers_queues(namesrv: NamesrvServer) -> None:
    async with connect(namesrv.port) as conn:
        await conn.call(register_request(A, "broker-a", (T4,)))
        await conn.call(register_request(B, "broker-b", (T4,)))
        assert (await conn.call(unregister_request(A, "broker-a"))).code == ResponseCode.SUCCESS
        route = await route_of(conn, "TopicT")
        assert [d.broker_name for d in route.broker_datas] == ["broker-b"]


async def test_bad_crc_is_refused_and_the_previous_routes_stay(namesrv: NamesrvServer) -> None:
    async with connect(namesrv.port) as conn:
        await conn.call(register_request(A, "broker-a", (T4,)))
        bad = register_request(A, "broker-a", (TopicConfigData("Other", 1, 1, 6),))
        bad.ext_fields["bodyCrc32"] = str(int(bad.ext_fields["bodyCrc32"]) ^ 1)
        answer = await conn.call(bad)
        assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
        assert [q.write_queue_nums for q in (await route_of(conn, "TopicT")).queue_datas] == [4]
        assert (await conn.call(route_request("Other"))).code == ResponseCode.TOPIC_NOT_EXIST


@pytest.mark.parametrize(
    ("body", "compressed", "remark"),
    [
        (b"\x78\x9cnot zlib", True, "Failed to decode RegisterBrokerBody: the compressed body"),
        (b"[1,2]", False, "register broker body is not a JSON object"),
        (
            b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"a b":{"topicName":"a b"}}}}',
            False,
            "topic 'a b' is not 1 to",
        ),
    ],
)
async def test_bad_body_is_refused_and_the_previous_routes_stay(
    namesrv: NamesrvServer, body: bytes, compressed: bool, remark: str
) -> None:
    async with connect(namesrv.port) as conn:
        await conn.call(register_request(A, "broker-a", (T4,)))
        bad = register_request(A, "broker-a", compressed=compressed, version=DataVersion(9, 9))
        bad.body = body
        bad.ext_fields["bodyCrc32"] = "0"  # not checked: the body itself is wrong
        answer = await conn.call(bad)
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark is not None and remark in answer.remark
        assert [d.broker_name for d in (await route_of(conn, "TopicT")).broker_datas] == [
            "broker-a"
        ]
        assert namesrv.routes.broker_live_table[A].data_version == DataVersion(1, 1000)


async def test_header_problems_are_answered_by_name(namesrv: NamesrvServer) -> None:
    async with connect(namesrv.port) as conn:
        missing = register_request(A, "broker-a")
        del missing.ext_fields["brokerAddr"]
        answer = await conn.call(missing)
        assert (answer.code, answer.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "the custom field brokerAddr is null",
        )
        blank = register_request(" ", "broker-a")
        assert "broker address is blank" in str((await conn.call(blank)).remark)
        unknown = await conn.call(request(9999))
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert namesrv.routes.broker_live_table == {}


async def test_registration_bounds_come_from_the_configuration(
    nursery: trio.Nursery, namesrv_config: NamesrvConfig
) -> None:
    config = with_changes(namesrv_config, max_brokers=1, max_topics_per_registration=2)
    server = await start_namesrv(nursery, config)
    async with connect(server.port) as conn:
        assert (await conn.call(register_request(A, "broker-a", (T4,)))).code == 0
        answer = await conn.call(register_request(B, "broker-b", (T4,)))
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert "holds 1 broker addresses already (max_brokers)" in str(answer.remark)
        many = tuple(TopicConfigData(f"T{i}", 1, 1, 6) for i in range(3))
        answer = await conn.call(register_request(A, "broker-a", many, version=DataVersion(2, 2)))
        assert "3 topics are more than the limit of 2" in str(answer.remark)
        assert server.routes.get_all_topic_list() == {"TopicT"}
    server.shutdown()


async def test_delete_topic_and_write_perm(namesrv: NamesrvServer) -> None:
    async with connect(namesrv.port) as conn:
        await conn.call(register_request(A, "broker-a", (T4, TopicConfigData("U", 1, 1, 6))))
        wipe = await conn.call(
            request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
        )
        assert wipe.ext_fields == {"wipeTopicCount": "2"}
        assert [q.perm for q in (await route_of(conn, "TopicT")).queue_datas] == [4]
        add = await conn.call(
            request(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
        )
        assert add.ext_fields == {"addTopicCount": "2"}
        assert [q.perm for q in (await route_of(conn, "TopicT")).queue_datas] == [6]
        deleted = await conn.call(request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "U"}))
        assert deleted.code == ResponseCode.SUCCESS
        assert (await conn.call(route_request("U"))).code == ResponseCode.TOPIC_NOT_EXIST


async def test_query_data_version(namesrv: NamesrvServer) -> None:
    fields = {"brokerName": "broker-a", "brokerAddr": A, "clusterName": "C", "brokerId": "0"}
    async with connect(namesrv.port) as conn:
        await conn.call(register_request(A, "broker-a", (T4,), version=DataVersion(3, 30)))
        same = await conn.call(
            request(RequestCode.QUERY_DATA_VERSION, fields, b'{"counter":3,"timestamp":30}')
        )
        assert same.ext_fields == {"changed": "false"}
        assert json.loads(same.body or b"") == {"counter": 3, "timestamp": 30}
        other = await conn.call(
            request(RequestCode.QUERY_DATA_VERSION, fields, b'{"counter":4,"timestamp":40}')
        )
        assert other.ext_fields == {"changed": "true"}


async def test_kv_config_requests(namesrv: NamesrvServer, tmp_path: pathlib.Path) -> None:
    async with connect(namesrv.port) as conn:
        put = {"namespace": "ORDER_TOPIC_CONFIG", "key": "TopicT", "value": "broker-a:4"}
        assert (await conn.call(request(RequestCode.PUT_KV_CONFIG, put))).code == 0
        get = await conn.call(
            request(RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "TopicT"})
        )
        assert get.ext_fields == {"value": "broker-a:4"}
        listed = await conn.call(
            request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"})
        )
        assert json.loads(listed.body or b"") == {"table": {"TopicT": "broker-a:4"}}
        # A registering broker is answered the ORDER_TOPIC_CONFIG namespace.
        answer = await conn.call(register_request(A, "broker-a", (T4,)))
        assert json.loads(answer.body or b"") == {"table": {"TopicT": "broker-a:4"}}
        on_disk = json.loads((tmp_path / "kvConfig.json").read_text())
        assert on_disk == {"configTable": {"ORDER_TOPIC_CONFIG": {"TopicT": "broker-a:4"}}}
        key = {"namespace": "ORDER_TOPIC_CONFIG", "key": "TopicT"}
        assert (await conn.call(request(RequestCode.DELETE_KV_CONFIG, key))).code == 0
        missing = await conn.call(request(RequestCode.GET_KV_CONFIG, key))
        assert (missing.code, missing.remark) == (
            ResponseCode.QUERY_NOT_FOUND,
            "No config item, Namespace: ORDER_TOPIC_CONFIG Key: TopicT",
        )
        empty = await conn.call(request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "x"}))
        assert (empty.code, empty.remark) == (
            ResponseCode.QUERY_NOT_FOUND,
            "No config item, Namespace: x",
        )
        assert json.loads((tmp_path / "kvConfig.json").read_text()) == {"configTable": {}}


async def test_order_topic_conf_in_routes_when_enabled(
    nursery: trio.Nursery, namesrv_config: NamesrvConfig
) -> None:
    server = await start_namesrv(nursery, with_changes(namesrv_config, order_message_enable=True))
    async with connect(server.port) as conn:
        await conn.call(register_request(A, "broker-a", (T4,)))
        put = {"namespace": "ORDER_TOPIC_CONFIG", "key": "TopicT", "value": "broker-a:4"}
        await conn.call(request(RequestCode.PUT_KV_CONFIG, put))
        assert (await route_of(conn, "TopicT")).order_topic_conf == "broker-a:4"
    server.shutdown()


async def test_a_kv_write_the_disk_refuses_is_answered_and_not_kept(
    nursery: trio.Nursery, namesrv_config: NamesrvConfig, tmp_path: pathlib.Path
) -> None:
    blocker = tmp_path / "not-a-dir"
    config = with_changes(namesrv_config, kv_config_path=str(blocker / "kvConfig.json"))
    server = await start_namesrv(nursery, config)
    blocker.write_text("")  # the file's directory cannot be made any more
    async with connect(server.port) as conn:
        put = {"namespace": "N", "key": "k", "value": "v"}
        answer = await conn.call(request(RequestCode.PUT_KV_CONFIG, put))
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert str(answer.remark).startswith("the KV config cannot be written")
        get = await conn.call(request(RequestCode.GET_KV_CONFIG, {"namespace": "N", "key": "k"}))
        assert get.code == ResponseCode.QUERY_NOT_FOUND
    server.shutdown()


async def test_kv_bounds(nursery: trio.Nursery, namesrv_config: NamesrvConfig) -> None:
    config = with_changes(namesrv_config, max_kv_entries=1, max_kv_field_length=8)
    server = await start_namesrv(nursery, config)
    async with connect(server.port) as conn:
        put = {"namespace": "N", "key": "k", "value": "v"}
        assert (await conn.call(request(RequestCode.PUT_KV_CONFIG, put))).code == 0
        again = await conn.call(request(RequestCode.PUT_KV_CONFIG, {**put, "value": "w"}))
        assert again.code == 0  # the same key: no new entry
        full = await conn.call(request(RequestCode.PUT_KV_CONFIG, {**put, "key": "k2"}))
        assert "holds 1 entries (max_kv_entries)" in str(full.remark)
        long = await conn.call(request(RequestCode.PUT_KV_CONFIG, {**put, "value": "x" * 9}))
        assert long.remark == "value: 9 characters are more than 8"
    server.shutdown()


async def test_garbage_closes_the_connection_after_answering_the_frames_before_it(
    namesrv: NamesrvServer,
) -> None:
    async with connect(namesrv.port) as conn:
        await conn.call(register_request(A, "broker-a", (T4,)))
        frame = encode_frame(route_request("TopicT"))
        await conn.stream.send_all(frame + b"\xff\xff\xff\xff garbage")
        assert (await conn.receive()).code == ResponseCode.SUCCESS
        assert await conn.closed_by_peer()
    # The broker registered on that connection left with it (4.9's onChannelDestroy).
    async with connect(namesrv.port) as other:
        assert (await other.call(route_request("TopicT"))).code == ResponseCode.TOPIC_NOT_EXIST


async def test_a_oneway_request_is_not_answered(namesrv: NamesrvServer) -> None:
    async with connect(namesrv.port) as conn:
        oneway = register_request(A, "broker-a", (T4,))
        oneway = RemotingCommand(
            oneway.code,
            opaque=oneway.opaque,
            flag=2,
            ext_fields=oneway.ext_fields,
            body=oneway.body,
        )
        await conn.stream.send_all(encode_frame(oneway))
        answer = await conn.call(route_request("TopicT"))
        assert answer.code == ResponseCode.SUCCESS  # the first frame back answers the route


async def test_a_fault_of_ours_is_answered_and_the_connection_kept(
    namesrv: NamesrvServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(topic: str) -> TopicRouteData | None:
        raise RuntimeError(f"broken lookup of {topic}")

    async with connect(namesrv.port) as conn:
        await conn.call(register_request(A, "broker-a", (T4,)))
        monkeypatch.setattr(namesrv.routes, "pickup_topic_route_data", broken)
        answer = await conn.call(route_request("TopicT"))
        assert (answer.code, answer.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "broken lookup of TopicT",
        )
        monkeypatch.undo()
        assert [d.broker_name for d in (await route_of(conn, "TopicT")).broker_datas] == [
            "broker-a"
        ]


async def test_connections_past_max_connections_are_closed_at_once(
    nursery: trio.Nursery, namesrv_config: NamesrvConfig
) -> None:
    server = await start_namesrv(nursery, with_changes(namesrv_config, max_connections=1))
    async with connect(server.port) as first:
        await first.call(register_request(A, "broker-a", (T4,)))
        async with connect(server.port) as second:
            assert await second.closed_by_peer()
        assert (await route_of(first, "TopicT")).broker_datas[0].broker_addrs == {0: A}
    with trio.fail_after(10):
        while server.connections:  # noqa: ASYNC110 (the server's side of the close)
            await trio.sleep(0.01)
    async with connect(server.port) as again:  # the slot is free again
        assert (await again.call(route_request("TopicT"))).code == ResponseCode.TOPIC_NOT_EXIST
    server.shutdown()


async def test_system_and_unit_topic_lists_and_the_config(namesrv: NamesrvServer) -> None:
    unit = TopicConfigData("Unit", 1, 1, 6, topic_sys_flag=1)
    unit_sub = TopicConfigData("UnitSub", 1, 1, 6, topic_sys_flag=2)
    both = TopicConfigData("Both", 1, 1, 6, topic_sys_flag=3)
    async with connect(namesrv.port) as conn:
        await conn.call(register_request(A, "broker-a", (T4, unit, unit_sub, both)))
        system = await conn.call(request(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS))
        assert TopicList.from_json(system.body) == TopicList(
            frozenset({"DefaultCluster", "broker-a"}), A
        )
        lists = {}
        for code in (
            RequestCode.GET_UNIT_TOPIC_LIST,
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST,
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
        ):
            lists[code] = TopicList.from_json((await conn.call(request(code))).body).topic_list
        assert lists == {
            RequestCode.GET_UNIT_TOPIC_LIST: {"Unit", "Both"},
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: {"UnitSub", "Both"},
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: {"UnitSub"},
        }
        config = await conn.call(request(RequestCode.GET_NAMESRV_CONFIG))
        properties = parse_properties(config.body)
        assert properties["kvConfigPath"] == namesrv.config.kv_config_path
        assert properties["listenPort"] == "0"
        assert properties["orderMessageEnable"] == "false"
        assert properties["brokerExpiredS"] == "120.0"
