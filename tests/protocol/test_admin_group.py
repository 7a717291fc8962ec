"""Admin group bodies against hand-written 4.9 fastjson text (tests/golden), the fastjson
reader's refusals, and round trips of what the broker writes."""

from __future__ import annotations

import pytest

from protocol.admin_group import (
    Connection,
    ConsumerConnection,
    ConsumerOffsetWrapper,
    ConsumeStats,
    GroupList,
    MessageQueue,
    OffsetWrapper,
    ProducerConnection,
    ResetOffsetBody,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
)
from protocol.errors import HeaderFieldError
from protocol.fastjson import MAX_DEPTH, ObjectKey, dumps, loads
from tests.golden import GOLDEN_DIR


def golden() -> dict[str, bytes]:
    bodies: dict[str, bytes] = {}
    name = ""
    for line in (GOLDEN_DIR / "admin_group_bodies.fastjson").read_text().splitlines():
        if line.startswith("### "):
            name = line.removeprefix("### ")
        elif name and line and not line.startswith("#"):
            bodies[name] = line.encode()
    return bodies


GOLDEN = golden()
MQ0 = MessageQueue("TopicTest", "broker-a", 0)
MQ1 = MessageQueue("TopicTest", "broker-a", 1)


def test_consume_stats_reads_and_writes_fastjson_text() -> None:
    stats = ConsumeStats.decode(GOLDEN["ConsumeStats"])
    assert stats == ConsumeStats(
        {
            MQ0: OffsetWrapper(12, 10, 1700000000123),
            MQ1: OffsetWrapper(7, 7, 1700000000456),
        },
        2.5,
    )
    assert stats.lag == 2
    assert stats.encode() == GOLDEN["ConsumeStats"]


def test_reset_offset_bodies_both_forms() -> None:
    body = ResetOffsetBody.decode(GOLDEN["ResetOffsetBody"])
    assert body.offset_table == {MQ0: 3, MQ1: 0}
    assert body.encode() == GOLDEN["ResetOffsetBody"]
    assert body.encode_for_c() == GOLDEN["ResetOffsetBodyForC"]


def test_connections_and_lists() -> None:
    consumer = ConsumerConnection.decode(GOLDEN["ConsumerConnection"])
    assert consumer.connections == (
        Connection("10.0.0.5@1234#9876", "10.0.0.5:52110", "JAVA", 407),
    )
    assert consumer.subscriptions["TopicTest"].sub_version == 1700000000000
    assert (consumer.consume_type, consumer.message_model) == ("CONSUME_PASSIVELY", "CLUSTERING")
    assert consumer.encode() == GOLDEN["ConsumerConnection"]
    producer = ProducerConnection.decode(GOLDEN["ProducerConnection"])
    assert producer.connections[0].language == "CPP"
    assert producer.encode() == GOLDEN["ProducerConnection"]
    assert GroupList.decode(GOLDEN["GroupList"]).groups == ("g1", "g2")
    assert GroupList(("g2", "g1")).encode() == GOLDEN["GroupList"]


def test_offset_table_with_integer_keys() -> None:
    offsets = ConsumerOffsetWrapper.decode(GOLDEN["ConsumerOffsetSerializeWrapper"])
    assert offsets.offset_table == {"%RETRY%g1@g1": {0: 0}, "TopicTest@g1": {0: 10, 1: 7}}
    assert offsets.encode() == GOLDEN["ConsumerOffsetSerializeWrapper"]
    # standard JSON (quoted keys), as a 4.9.4+ fastjson may be told to write, reads the same
    quoted = b'{"offsetTable":{"%RETRY%g1@g1":{"0":0},"TopicTest@g1":{"0":10,"1":7}}}'
    assert ConsumerOffsetWrapper.decode(quoted) == offsets


def test_subscription_groups() -> None:
    wrapper = SubscriptionGroupWrapper.decode(GOLDEN["SubscriptionGroupWrapper"])
    assert wrapper.table["g1"] == SubscriptionGroupConfig(
        "g1", consume_enable=False, retry_queue_nums=2, retry_max_times=5
    )
    assert wrapper.data_version == {"counter": 3, "timestamp": 1700000000000}
    assert wrapper.encode() == GOLDEN["SubscriptionGroupWrapper"]


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b'{"offsetTable":{"q0":{"brokerOffset":1}}}', "not a MessageQueue object"),
        (b'{"offsetTable":{{"topic":"T","queueId":"x","brokerName":"b"}:{}}}', "queueId"),
        (b'{"offsetTable":{{"topic":{"a":1}}:{}}}', "only plain values"),
        (b'{"offsetTable":{{"topic":"T","queueId":0,"brokerName":"b"}:[]}}', "not an object"),
        (b'{"consumeTps":"fast"}', "consumeTps is not a number"),
        (b'{"offsetTable":{', "expected"),
        (b'{"a":1} x', "not JSON at character 8"),
        (b"\xff", "not UTF-8"),
        (b"[" * (MAX_DEPTH + 2), "nested deeper"),
        (b"{true:1}", "expected a key"),
    ],
)
def test_bad_bodies_are_errors_naming_the_problem(body: bytes, problem: str) -> None:
    with pytest.raises(HeaderFieldError) as bad:
        ConsumeStats.decode(body)
    assert problem in str(bad.value)


def test_fastjson_round_trip_of_mixed_keys() -> None:
    value = {ObjectKey.of({"b": 1, "a": "x"}): [1, 2.5, None, True, "é"], 7: {"k": -3}}
    text = dumps(value)
    assert text == '{7:{"k":-3},{"a":"x","b":1}:[1,2.5,null,true,"é"]}'
    assert loads(text) == value
    with pytest.raises(TypeError):
        dumps({1.5: 1})
