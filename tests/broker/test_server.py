"""The server over real loopback sockets: many connections, a bad peer among good ones, the
name-server role on the broker port and on the extra port, graceful shutdown in-process."""

from __future__ import annotations

import contextlib
import json
import pathlib
import socket

import pytest
import trio
import trio.testing
from structlog.testing import capture_logs

import broker.server as server_module
from broker.connection import Connection
from broker.metrics import BrokerMetrics
from protocol.codes import MQ_VERSION, RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.consumer_headers import FLAG_SUBSCRIPTION, PullMessageRequestHeader
from protocol.frame import encode_frame
from protocol.route import ClusterInfo, HeartbeatData, ProducerData, TopicRouteData
from rmq_client.producer import ConnectionClosedError, Message, Producer, SendError, open_producer
from store.flush import thread_flusher
from store.mapped_file import MappedFile
from store.mapped_file_queue import Flusher
from store.reader import CommitLogReader
from tests.conftest import RunningBroker, make_config, start_broker
from tests.store.conftest import wait_until


async def test_unknown_request_code_is_not_supported(producer: Producer) -> None:
    response = await producer.request(RemotingCommand.request(RequestCode.PULL_MESSAGE + 1000))
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert response.remark == " request type 1011 not supported"


async def test_a_malformed_frame_closes_only_its_connection(broker: RunningBroker) -> None:
    async with (
        open_producer("127.0.0.1", broker.port) as good,
        open_producer("127.0.0.1", broker.port) as bad,
    ):
        await good.send(Message("Good", b"before"))
        with capture_logs() as logs:
            await bad.stream.send_all(b"\x00\x00\x00\x10\x05\x00\x00\x04garbagegarbage!!")
            with trio.fail_after(5), pytest.raises(ConnectionClosedError):
                await bad.send(Message("Bad", b"never"))
        assert [e["event"] for e in logs].count("protocol_error") == 1
        result = await good.send(Message("Good", b"after"))
        assert result.queue_offset >= 0
    await broker.stop()
    with CommitLogReader(broker.config.store.store_path_root_dir) as reader:
        bodies = [r.body for r in reader.iter_records(reader.min_offset)]
    assert bodies == [b"before", b"after"]


async def test_two_hundred_concurrent_connections(broker: RunningBroker) -> None:
    offsets: list[str] = []

    async def client(index: int) -> None:
        async with open_producer("127.0.0.1", broker.port, timeout_s=20) as producer:
            result = await producer.send(Message("Many", f"m{index}".encode(), keys=str(index)))
            offsets.append(result.offset_msg_id)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for index in range(200):
                nursery.start_soon(client, index)
    assert len(set(offsets)) == 200
    await broker.stop()
    with CommitLogReader(broker.config.store.store_path_root_dir) as reader:
        bodies = {r.body for r in reader.iter_records(reader.min_offset)}
    assert bodies == {f"m{i}".encode() for i in range(200)}


async def test_route_cluster_heartbeat_and_unregister(
    producer: Producer, broker: RunningBroker
) -> None:
    route = await producer.get_route("NeverSeen")  # unknown: what a first send would create
    [queue] = route.queue_datas
    assert (queue.read_queue_nums, queue.write_queue_nums, queue.perm) == (4, 4, 6)
    [data] = route.broker_datas
    assert data.broker_addrs == {0: f"127.0.0.1:{broker.port}"}
    assert data.cluster == "DefaultCluster"
    info = await producer.get_cluster_info()
    assert info.cluster_addr_table == {"DefaultCluster": ["broker-a"]}
    heartbeat = HeartbeatData("c@1", (ProducerData("pg"),)).to_json() + b"\n"
    answer = await producer.request(RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat))
    assert (answer.code, answer.version, answer.remark) == (0, MQ_VERSION, None)
    unregister = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, {"clientID": "c@1"})
    assert (await producer.request(unregister)).code == 0
    missing = await producer.request(RemotingCommand.request(RequestCode.UNREGISTER_CLIENT))
    assert (missing.code, missing.remark) == (1, "the custom field clientID is null")


async def test_route_body_is_standard_json(producer: Producer) -> None:
    await producer.send(Message("Known", b"x"))
    command = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Known"})
    body = json.loads((await producer.request(command)).body or b"")
    assert body["brokerDatas"][0]["brokerAddrs"].keys() == {"0"}
    assert body["queueDatas"][0]["writeQueueNums"] == 4
    assert TopicRouteData.from_json(json.dumps(body).encode()).queue_datas[0].perm == 6


async def test_no_route_without_auto_create(nursery: trio.Nursery, tmp_path: pathlib.Path) -> None:
    running = await start_broker(
        nursery, make_config(tmp_path / "s", auto_create_topic_enable="false")
    )
    async with open_producer("127.0.0.1", running.port) as client:
        with pytest.raises(SendError) as info:
            await client.get_route("Nope")
    assert info.value.code == ResponseCode.TOPIC_NOT_EXIST
    assert info.value.remark is not None
    assert info.value.remark.startswith("No topic route info in name server for the topic: Nope")
    await running.stop()


async def test_extra_name_server_port_answers_routes_but_not_sends(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    running = await start_broker(nursery, make_config(tmp_path / "s", namesrv_listen="127.0.0.1:0"))
    [(_, namesrv_port)] = running.server.namesrv_addresses
    assert namesrv_port != running.port
    async with open_producer("127.0.0.1", namesrv_port) as namesrv:
        route = await namesrv.get_route("AnyTopic")
        assert route.broker_datas[0].broker_addrs[0] == f"127.0.0.1:{running.port}"
        assert isinstance(await namesrv.get_cluster_info(), ClusterInfo)
        with pytest.raises(SendError) as info:
            await namesrv.send(Message("AnyTopic", b"x"))
        assert info.value.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    await running.stop()


async def test_shutdown_lets_running_requests_finish(
    nursery: trio.Nursery, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SYNC_FLUSH answers a send after its flush: holding the flushes keeps every send running.
    holding, released = False, trio.Event()

    def held_flusher(metrics: BrokerMetrics) -> Flusher:
        async def flush(mapped_file: MappedFile) -> None:
            if holding:
                await released.wait()
            await thread_flusher(mapped_file)

        return flush

    monkeypatch.setattr(server_module, "timed_flusher", held_flusher)
    running = await start_broker(nursery, make_config(tmp_path / "s", flush_disk_type="SYNC_FLUSH"))
    results: list[str] = []
    late: list[bool] = []
    async with open_producer("127.0.0.1", running.port, timeout_s=20) as client:
        await client.send(Message("Drain", b"first"))
        [connection] = running.server.connections
        holding = True

        async def sender(index: int) -> None:
            results.append((await client.send(Message("Drain", b"%d" % index))).offset_msg_id)

        async def late_sender() -> None:
            with pytest.raises(ConnectionClosedError):  # never read, never answered
                await client.send(Message("Drain", b"late"))
            late.append(True)

        with trio.fail_after(20):
            async with trio.open_nursery() as senders:
                for index in range(50):
                    senders.start_soon(sender, index)
                # every request read by the broker, each waiting for its flush
                await wait_until(lambda: connection.inflight == 50, 20)
                running.server.shutdown()
                await wait_until(lambda: connection.close_reason == "shutdown")  # reads no more
                senders.start_soon(late_sender)
                await trio.testing.wait_all_tasks_blocked()  # it waits for its answer
                released.set()
        await running.stop()
    assert len(results) == 50  # every request read before the shutdown was answered
    assert late == [True]
    with CommitLogReader(running.config.store.store_path_root_dir) as reader:
        stored = {r.physical_offset: r.body or b"" for r in reader.iter_records(reader.min_offset)}
    acked = {int(msg_id[-16:], 16) for msg_id in results}
    assert acked <= stored.keys()  # every acknowledged message survived the shutdown
    assert sorted(stored[offset] for offset in acked) == sorted(b"%d" % i for i in range(50))
    assert b"late" not in stored.values()


async def test_sync_flushes_are_timed_into_the_flush_histogram(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    config = make_config(tmp_path / "store", flush_disk_type="SYNC_FLUSH")
    running = await start_broker(nursery, config)
    metrics = running.server.broker.metrics
    assert metrics is not None
    flushes = "rmq_broker_flush_latency_seconds_count"
    assert (metrics.registry.get_sample_value(flushes) or 0) == 0
    async with open_producer("127.0.0.1", running.port) as client:
        for index in range(3):
            await client.send(Message("Timed", b"%d" % index))
    # SYNC_FLUSH acknowledges after a flush, so each send was covered by a timed flush.
    assert (metrics.registry.get_sample_value(flushes) or 0) >= 1
    await running.stop()


def pull_frame(opaque: int) -> bytes:
    """A PULL of one message at offset 0 of BigQ queue 0, with its subscription."""
    header = PullMessageRequestHeader(
        "slow-reader", "BigQ", 0, 0, 1, FLAG_SUBSCRIPTION, 0, 0, 0, "*", "TAG"
    )
    command = RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext_fields())
    command.opaque = opaque
    return encode_frame(command)


async def test_a_client_that_stops_reading_is_closed_after_the_write_timeout(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    running = await start_broker(nursery, make_config(tmp_path / "s", write_timeout_s=1.0))
    async with open_producer("127.0.0.1", running.port) as good:
        await good.send(Message("BigQ", b"B" * (512 << 10), queue_id=0))
        # A tiny receive buffer: the broker's answers fill the path long before they are read.
        sock = trio.socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await sock.connect(("127.0.0.1", running.port))
        slow = trio.SocketStream(sock)
        local_port = sock.getsockname()[1]
        with capture_logs() as logs:
            # 64 pulls of a 512 KiB message: 32 MiB of answers that this client never reads
            await slow.send_all(b"".join(pull_frame(n) for n in range(64)))

            def accepted() -> list[Connection]:
                return [c for c in running.server.connections if c.ctx.remote[1] == local_port]

            await wait_until(lambda: bool(accepted()))
            [connection] = accepted()
            await wait_until(lambda: connection.requests == 64, 20)
            served = 0
            with trio.fail_after(30):  # closed within a generous deadline, others served meanwhile
                while connection in running.server.connections:
                    result = await good.send(Message("Other", b"%d" % served, queue_id=0))
                    assert result.queue_offset == served
                    served += 1
        assert connection.close_reason == "write_failed"
        assert [e["error"] for e in logs if e["event"] == "write_failed"] == ["TooSlowError"]
        assert (await good.send(Message("Other", b"after", queue_id=0))).queue_offset == served
        with trio.fail_after(10):  # what reached the client ends: the broker closed it
            with contextlib.suppress(trio.BrokenResourceError):
                while await slow.receive_some(1 << 20):
                    pass
        await slow.aclose()
    await running.stop()
