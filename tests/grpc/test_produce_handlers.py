"""The route, session and producer handlers of the RocketMQ 5 service called in process against
a real broker over a real store: what each answers and each refusal's 5.x code, what a send
stores (read back with the 4.x pull consumer), transactions ended and checked through
Telemetry."""

from __future__ import annotations

import pathlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from broker.grpc.methods import CallContext, path
from broker.grpc.send import RefusedError, _timer
from broker.grpc.service import methods
from broker.grpc.sessions import CLIENT_ID_KEY
from protocol.properties import decode_properties
from protocol.v2 import load
from rmq_client.producer import open_producer
from rmq_client.pull_consumer import PullConsumer
from store.decode import CommitLogRecord
from tests.conftest import RunningBroker, make_config, start_broker

ENDPOINT = ("10.0.0.7", 8081)
CONTEXT = CallContext(1, "127.0.0.1:40000", {CLIENT_ID_KEY: "client-1"})
definition, service = load()


def code(name: str) -> int:
    return int(definition.Code.Value(name))


def handler(broker: RunningBroker, rpc: str) -> Any:
    return methods(broker.server.broker, ENDPOINT)[path(rpc)].handler


def message(topic: str = "GrpcT", body: bytes = b"body", **system: Any) -> Any:
    system.setdefault("message_id", f"ID-{time.monotonic_ns()}")
    return definition.Message(
        topic=definition.Resource(name=topic),
        body=body,
        system_properties=definition.SystemProperties(**system),
    )


async def send(broker: RunningBroker, *messages: Any) -> Any:
    request = service.SendMessageRequest(messages=list(messages))
    return await handler(broker, "SendMessage")(request, CONTEXT)


async def pull_all(port: int, topic: str, wanted: int) -> list[CommitLogRecord]:
    records: list[CommitLogRecord] = []
    async with open_producer("127.0.0.1", port) as conn:
        consumer = PullConsumer(conn, f"reader_{topic}", "127.0.0.1@reader")
        await consumer.subscribe(topic)
        offsets = dict.fromkeys(range(8), 0)
        with trio.move_on_after(20):
            while len(records) < wanted:
                for queue_id in offsets:
                    result = await consumer.pull(topic, queue_id, offsets[queue_id])
                    records.extend(result.records if result.found else [])
                    offsets[queue_id] = max(offsets[queue_id], result.next_begin_offset)
                await trio.sleep(0.05)
    return records


@pytest.fixture
async def small(nursery: trio.Nursery, tmp_path: pathlib.Path) -> AsyncIterator[RunningBroker]:
    """A broker without topic auto-creation and with 1 KiB messages at most."""
    config = make_config(tmp_path / "store", auto_create_topic_enable=False, max_message_size=1024)
    running = await start_broker(nursery, config)
    yield running
    await running.stop()


async def test_query_route_lists_the_queues_at_the_grpc_endpoint(broker: RunningBroker) -> None:
    request = service.QueryRouteRequest(topic=definition.Resource(name="GrpcRoute"))
    answer = await handler(broker, "QueryRoute")(request, CONTEXT)
    assert answer.status.code == code("OK")
    queues = answer.message_queues
    assert [q.id for q in queues] == list(range(broker.config.default_topic_queue_nums))
    first = queues[0]
    assert first.permission == definition.Permission.Value("READ_WRITE")
    assert first.broker.name == broker.config.broker_name
    address = first.broker.endpoints.addresses[0]
    assert (address.host, address.port) == ENDPOINT
    assert first.broker.endpoints.scheme == definition.AddressScheme.Value("IPv4")
    accepted = {definition.MessageType.Name(t) for t in first.accept_message_types}
    assert accepted == {"NORMAL", "FIFO", "DELAY", "TRANSACTION"}
    assert broker.server.broker.topics.find("GrpcRoute") is not None  # auto-created


async def test_query_route_refusals(small: RunningBroker) -> None:
    query = handler(small, "QueryRoute")
    missing = service.QueryRouteRequest(topic=definition.Resource(name="Nowhere"))
    assert (await query(missing, CONTEXT)).status.code == code("TOPIC_NOT_FOUND")
    bad = service.QueryRouteRequest(topic=definition.Resource(name="bad topic!"))
    assert (await query(bad, CONTEXT)).status.code == code("ILLEGAL_TOPIC")


async def test_send_stores_what_a_4x_consumer_reads(broker: RunningBroker) -> None:
    sent = message(tag="TagA", keys=["k1", "k2"], message_group="g1", trace_context="tc")
    sent.user_properties["color"] = "blue"
    answer = await send(broker, sent, message(message_group="g1", body=b"second"))
    assert answer.status.code == code("OK")
    first, second = answer.entries
    assert first.message_id == sent.system_properties.message_id
    assert second.offset == first.offset + 1  # one message group, one queue
    records = await pull_all(broker.port, "GrpcT", 2)
    stored = next(r for r in records if r.body == b"body")
    props = decode_properties(stored.properties)
    assert props["TAGS"] == "TagA"
    assert props["KEYS"] == "k1 k2"
    assert props["color"] == "blue"
    assert props["__SHARDINGKEY"] == "g1"
    assert props["UNIQ_KEY"] == sent.system_properties.message_id
    assert props["TRACE_CONTEXT"] == "tc"
    assert stored.born_host[0] == "127.0.0.1"


async def test_sends_without_a_group_go_round_the_queues(broker: RunningBroker) -> None:
    answer = await send(broker, *[message(topic="GrpcRound") for _ in range(8)])
    assert answer.status.code == code("OK")
    records = await pull_all(broker.port, "GrpcRound", 8)
    assert sorted(r.queue_id for r in records) == list(range(8))


@pytest.mark.parametrize(
    ("fields", "users", "expected"),
    [
        ({"tag": "a|b"}, {}, "ILLEGAL_MESSAGE_TAG"),
        ({"keys": [" "]}, {}, "ILLEGAL_MESSAGE_KEY"),
        ({"message_id": ""}, {}, "ILLEGAL_MESSAGE_ID"),
        ({"message_group": "g" * 65}, {}, "ILLEGAL_MESSAGE_GROUP"),
        ({}, {"TAGS": "x"}, "ILLEGAL_MESSAGE_PROPERTY_KEY"),
        ({}, {"k": "line\nbreak"}, "ILLEGAL_MESSAGE_PROPERTY_KEY"),
        ({}, {f"p{i}": "v" for i in range(129)}, "MESSAGE_PROPERTIES_TOO_LARGE"),
        ({}, {"big": "v" * 17_000}, "MESSAGE_PROPERTIES_TOO_LARGE"),
    ],
)
async def test_send_refusals(
    broker: RunningBroker, fields: dict[str, Any], users: dict[str, str], expected: str
) -> None:
    refused = message(topic="GrpcRefused", **fields)
    refused.user_properties.update(users)
    answer = await send(broker, refused)
    assert answer.status.code == code(expected)
    assert answer.entries[0].status.code == code(expected)
    consume = broker.server.broker.consume
    assert consume is not None
    assert all(
        consume.max_offset_in_queue("GrpcRefused", q) == 0 for q in range(8)
    )  # nothing stored


async def test_send_refusals_of_the_topic_body_and_request(small: RunningBroker) -> None:
    small.server.broker.topics.create_in_send_back("Small", 1, 6, 0)
    assert (await send(small, message("bad topic!"))).status.code == code("ILLEGAL_TOPIC")
    too_large = await send(small, message("Small", body=b"x" * 1025))
    assert too_large.status.code == code("MESSAGE_BODY_TOO_LARGE")
    assert (await send(small, message("Missing"))).status.code == code("TOPIC_NOT_FOUND")
    assert (await send(small)).status.code == code("MESSAGE_CORRUPTED")
    mixed = await send(small, message("Small"), message("Other"))
    assert mixed.status.code == code("MESSAGE_CORRUPTED")
    far = definition.google_dot_protobuf_dot_timestamp__pb2.Timestamp(
        seconds=int(time.time()) + 30 * 86400
    )
    late = await send(small, message("Small", delivery_timestamp=far))
    assert late.status.code == code("ILLEGAL_DELIVERY_TIME")
    results = await send(small, message("Small"), message("Small", body=b"x" * 2000))
    assert results.status.code == code("MULTIPLE_RESULTS")
    assert [e.status.code for e in results.entries] == [code("OK"), code("MESSAGE_BODY_TOO_LARGE")]


def test_delivery_times_park_at_the_longest_level_not_past_them() -> None:
    levels = (1000, 5000, 10000)
    assert _timer(1000, 1000, levels) == {}  # due now: no delay
    assert _timer(4000, 1000, levels) == {"TIMER_DELIVER_MS": "4000", "DELAY": "1"}
    assert _timer(12000, 1000, levels) == {"TIMER_DELIVER_MS": "12000", "DELAY": "3"}
    assert _timer(1500, 1000, levels)["DELAY"] == "1"  # under the shortest: the shortest
    with pytest.raises(RefusedError):
        _timer(4 * 86_400_000, 0, levels)


async def test_heartbeat_and_termination_need_a_client_id(broker: RunningBroker) -> None:
    anonymous = CallContext(2, "127.0.0.1:40001")
    beat = handler(broker, "Heartbeat")
    assert (await beat(service.HeartbeatRequest(), anonymous)).status.code == code(
        "CLIENT_ID_REQUIRED"
    )
    assert (await beat(service.HeartbeatRequest(), CONTEXT)).status.code == code("OK")
    bye = handler(broker, "NotifyClientTermination")
    request = service.NotifyClientTerminationRequest()
    assert (await bye(request, anonymous)).status.code == code("CLIENT_ID_REQUIRED")
    assert (await bye(request, CONTEXT)).status.code == code("OK")


async def test_a_delivery_time_between_levels_is_kept(broker: RunningBroker) -> None:
    """2.5 s ahead with levels of 1 s and 5 s: parked at 1 s, then again until its time, so it
    arrives neither at 1 s (early) nor at 5 s (the next level)."""
    deliver_ms = int(time.time() * 1000) + 2500
    timestamp = definition.google_dot_protobuf_dot_timestamp__pb2.Timestamp(
        seconds=deliver_ms // 1000, nanos=(deliver_ms % 1000) * 1_000_000
    )
    answer = await send(broker, message("GrpcTimer", b"later", delivery_timestamp=timestamp))
    assert answer.status.code == code("OK")
    [record] = await pull_all(broker.port, "GrpcTimer", 1)
    assert record.store_timestamp >= deliver_ms
    assert record.store_timestamp < deliver_ms + 2500  # not held to the 5 s level
    props = decode_properties(record.properties)
    assert props["TIMER_DELIVER_MS"] == str(deliver_ms)
    assert "DELAY" not in props


async def test_a_delivery_time_survives_a_restart(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    config = make_config(tmp_path / "store")
    first = await start_broker(nursery, config)
    deliver_ms = int(time.time() * 1000) + 3500
    timestamp = definition.google_dot_protobuf_dot_timestamp__pb2.Timestamp(
        seconds=deliver_ms // 1000, nanos=(deliver_ms % 1000) * 1_000_000
    )
    answer = await send(first, message("GrpcTimerRestart", b"x", delivery_timestamp=timestamp))
    assert answer.status.code == code("OK")
    await first.stop()
    second = await start_broker(nursery, config)
    try:
        [record] = await pull_all(second.port, "GrpcTimerRestart", 1)
        assert record.store_timestamp >= deliver_ms
        assert record.body == b"x"
    finally:
        await second.stop()
