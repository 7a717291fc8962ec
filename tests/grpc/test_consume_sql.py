"""ReceiveMessage with a SQL filter (5.x's FilterType SQL, passed on as SQL92 as the proxy does)
over a running broker (without enable_property_filter: 5.x's pop serves SQL92 whatever it says),
messages sent by the 4.x remoting producer:
only messages whose properties match are streamed, the others stay for other groups; a bad
expression is ILLEGAL_FILTER_EXPRESSION and nothing is handed out. And the official RocketMQ 5
Python client's PushConsumer subscribed with a SQL92 expression, against a broker process."""

from __future__ import annotations

import pathlib
from collections import Counter

import pytest
import trio

from rmq_client.producer import Message, Producer, open_producer
from tests.conftest import RunningBroker
from tests.daemon import Daemon
from tests.grpc.consume_calls import TOPIC, code, receive
from tests.grpc.official import run_script


async def test_a_sql_receive_streams_only_matching_messages(
    broker: RunningBroker, producer: Producer
) -> None:
    for i in range(6):
        properties = {"n": str(i), "kind": "even" if i % 2 == 0 else "odd"}
        await producer.send(Message(TOPIC, b"m%d" % i, tags=f"T{i}", properties=properties))
    ctx = broker.server.broker
    sql = "kind = 'even' AND n > 0"
    got = await receive(ctx, group="sql-1", filter_type="SQL", expression=sql)
    assert got.status.code == code("OK")
    assert sorted(m.body for m in got.messages) == [b"m2", b"m4"]
    assert {dict(m.user_properties)["kind"] for m in got.messages} == {"even"}
    # those are in flight, the rest did not match: nothing more for this group
    again = await receive(ctx, group="sql-1", filter_type="SQL", expression=sql)
    assert again.status.code == code("MESSAGE_NOT_FOUND")
    # system properties: the tag is TAGS
    tagged = await receive(ctx, group="sql-2", filter_type="SQL", expression="TAGS = 'T5'")
    assert [m.body for m in tagged.messages] == [b"m5"]
    # another group with a TAG filter still gets what it asks for
    tags = await receive(ctx, group="tag-group", filter_type="TAG", expression="T1 || T3")
    assert sorted(m.body for m in tags.messages) == [b"m1", b"m3"]


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("n >", "unexpected the end"),
        ("n > 'x'", "cannot be compared"),
        ("", "empty"),
        ("n > 1 garbage", "unexpected"),
    ],
)
async def test_a_bad_sql_expression_is_an_illegal_filter_expression(
    broker: RunningBroker, producer: Producer, expression: str, reason: str
) -> None:
    await producer.send(Message(TOPIC, b"kept", properties={"n": "5"}))
    ctx = broker.server.broker
    bad = await receive(ctx, group="sql-bad", filter_type="SQL", expression=expression)
    assert bad.status.code == code("ILLEGAL_FILTER_EXPRESSION")
    assert reason in bad.status.message
    assert bad.order == ["status"]
    good = await receive(ctx, group="sql-bad", filter_type="SQL", expression="n = 5")
    assert [m.body for m in good.messages] == [b"kept"]


async def _send_priced(port: int, topic: str, count: int) -> None:
    async with open_producer("127.0.0.1", port) as producer:
        for i in range(count):
            properties = {"price": str(i * 10), "region": ("eu", "us")[i % 2]}
            await producer.send(Message(topic, f"m-{i}".encode(), properties=properties))


def test_the_official_push_consumer_with_a_sql92_subscription(tmp_path: pathlib.Path) -> None:
    env = {"RMQ_GRPC_LISTEN": "127.0.0.1:0"}
    daemon = Daemon(tmp_path / "store", env=env)
    try:
        grpc_port = int(str(daemon.event("listening")["grpc_port"]))
        topic = "GrpcSql"
        trio.run(_send_priced, daemon.port, topic, 12)
        sql = "region = 'eu' AND price BETWEEN 20 AND 80"
        endpoint = f"127.0.0.1:{grpc_port}"
        # push mode waits 2 s more once it has them all: a message outside the filter shows
        result = run_script("client_consume.py", "push", endpoint, "sql-5x", topic, "4", "60", sql)
        assert result["errors"] == []
        seen = result["seen"]
        assert isinstance(seen, list)
        assert Counter(row[0] for row in seen) == Counter(["m-2", "m-4", "m-6", "m-8"])
    finally:
        assert daemon.stop() == 0
