"""A change sent to a cluster of two masters where one is down: the live one makes it and gets
its line on stdout, the other one line on stderr, and the exit code is 1."""

from __future__ import annotations

import socket

import trio

from protocol.codes import RequestCode, ResponseCode
from protocol.frame import FrameDecoder, encode_frame
from protocol.route import BrokerData, ClusterInfo
from rmq_client.admin_groups import get_all_subscription_groups
from rmq_client.producer import Producer
from tests.broker.cli_admin.support import admin
from tests.daemon import Daemon


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_change_reaches_the_live_master_and_names_the_dead_one(
    nursery: trio.Nursery, daemon: Daemon, client: Producer
) -> None:
    live, dead = f"127.0.0.1:{daemon.port}", f"127.0.0.1:{closed_port()}"
    info = ClusterInfo(
        {
            "broker-a": BrokerData("Two", "broker-a", {0: live}),
            "broker-b": BrokerData("Two", "broker-b", {0: dead}),
        },
        {"Two": ["broker-a", "broker-b"]},
    ).to_json()

    async def name_server(stream: trio.SocketStream) -> None:
        decoder = FrameDecoder()
        async with stream:
            while data := await stream.receive_some(65536):
                for request in decoder.feed(data):
                    assert request.code == RequestCode.GET_BROKER_CLUSTER_INFO
                    response = request.make_response(ResponseCode.SUCCESS, body=info)
                    await stream.send_all(encode_frame(response))

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    nursery.start_soon(trio.serve_listeners, name_server, listeners)
    namesrv = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"

    run = await admin("updateSubGroup", "-n", namesrv, "-c", "Two", "-g", "two_masters")
    assert run.code == 1
    assert run.stdout == f"create subscription group to {live} success.\n"
    assert run.stderr.startswith(f"rmq-broker: admin updateSubGroup: broker {dead} unreachable")
    assert len(run.stderr.splitlines()) == 1 and "Traceback" not in run.stderr
    assert "two_masters" in (await get_all_subscription_groups(client)).table

    run = await admin("updateBrokerConfig", "-n", namesrv, "-k", "brokerPermission", "-v", "6")
    assert (run.code, run.stdout) == (1, f"update broker config success, {live}\n")
    assert dead in run.stderr and len(run.stderr.splitlines()) == 1
    nursery.cancel_scope.cancel()
