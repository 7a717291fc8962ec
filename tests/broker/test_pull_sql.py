"""SQL92 subscriptions of 4.x pulls against a real broker over loopback: only the messages whose
properties pass the selector come back, with the next offset past what was looked at; the
group's heartbeat subscription applies alike; CHECK_CLIENT_CONFIG; and the refusals (a bad
expression, an unknown type, property filtering off)."""

from __future__ import annotations

import json
import pathlib
from collections.abc import AsyncIterator

import pytest
import structlog
import trio

from broker.config import BrokerConfig
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.properties import decode_properties
from rmq_client.producer import Message, SendError, open_producer
from rmq_client.pull_consumer import PullConsumer, open_pull_consumer
from store.decode import CommitLogRecord
from store.lookup import LOOP_READ_MAX_BYTES
from tests.conftest import RunningBroker, make_config, start_broker

GROUP = "sql-pull-group"
TOPIC = "SqlTopic"
#: message i: a = i, region eu for even i, us for odd, TAGS TagA for i < 10, else TagB
COUNT = 20
EU_ABOVE_5 = [6, 8, 10, 12, 14, 16, 18]


@pytest.fixture
def broker_config(tmp_path: pathlib.Path) -> BrokerConfig:
    return make_config(tmp_path / "store", enable_property_filter=True)


@pytest.fixture
async def sent(broker: RunningBroker) -> AsyncIterator[None]:
    async with open_producer("127.0.0.1", broker.port) as producer:
        for i in range(COUNT):
            properties = {"a": str(i), "region": ("eu", "us")[i % 2]}
            tag = "TagA" if i < 10 else "TagB"
            await producer.send(
                Message(TOPIC, b"%d" % i, tags=tag, properties=properties, queue_id=0)
            )
    yield


def numbers(records: list[CommitLogRecord]) -> list[int]:
    return [int(r.body or b"") for r in records]


async def test_a_sql92_pull_returns_only_matching_messages_and_the_next_offset(
    broker: RunningBroker, sent: None
) -> None:
    sql = "a > 5 AND region = 'eu'"
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe(TOPIC, sql, "SQL92")
        every = await consumer.pull(TOPIC, 0, 0, expression=sql, expression_type="SQL92")
        assert every.found and numbers(every.records) == EU_ABOVE_5
        assert every.next_begin_offset == COUNT  # every unit was looked at
        # the records come back whole, properties and all
        assert decode_properties(every.records[0].properties)["region"] == "eu"
        two = await consumer.pull(TOPIC, 0, 0, max_nums=2, expression=sql, expression_type="SQL92")
        assert numbers(two.records) == [6, 8]
        assert two.next_begin_offset == 9  # after the last one handed out
        rest = await consumer.pull(TOPIC, 0, 9, expression=sql, expression_type="SQL92")
        assert numbers(rest.records) == EU_ABOVE_5[2:]
        # nothing matches: retry from past what was looked at, as for a tag filter
        none = await consumer.pull(TOPIC, 0, 0, expression="a > 100", expression_type="SQL92")
        assert none.code == ResponseCode.PULL_RETRY_IMMEDIATELY and not none.records
        assert none.next_begin_offset == COUNT
        # system properties are there too; a tag list of the same text would select nothing
        tags = "TAGS = 'TagB' AND a < 12"
        tagged = await consumer.pull(TOPIC, 0, 0, expression=tags, expression_type="SQL92")
        assert numbers(tagged.records) == [10, 11]
        # the group's subscription from the heartbeat applies when the pull carries none
        by_group = await consumer.pull(TOPIC, 0, 0)
        assert numbers(by_group.records) == EU_ABOVE_5


async def test_a_large_record_is_filtered_by_its_properties_too(broker: RunningBroker) -> None:
    big = b"x" * (LOOP_READ_MAX_BYTES + 1)
    async with open_producer("127.0.0.1", broker.port) as producer:
        for size in ("small", "large"):
            for keep in ("no", "yes"):
                body = big if size == "large" else b"s"
                props = {"keep": keep, "size": size}
                await producer.send(Message("SqlLarge", body, properties=props, queue_id=0))
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        got: list[tuple[str, int]] = []
        offset = 0
        with trio.fail_after(20):
            while offset < 4:
                result = await consumer.pull(
                    "SqlLarge", 0, offset, expression="keep = 'yes'", expression_type="SQL92"
                )
                got += [
                    (decode_properties(r.properties)["size"], len(r.body or b""))
                    for r in result.records
                ]
                offset = result.next_begin_offset
        assert got == [("small", 1), ("large", len(big))]


@pytest.mark.parametrize(
    "case",
    [
        ("a >", "SQL92", ResponseCode.SUBSCRIPTION_PARSE_FAILED, "unexpected the end"),
        ("a = 'x", "SQL92", ResponseCode.SUBSCRIPTION_PARSE_FAILED, "unclosed string"),
        ("a > 'x'", "SQL92", ResponseCode.SUBSCRIPTION_PARSE_FAILED, "cannot be compared"),
        ("", "SQL92", ResponseCode.SUBSCRIPTION_PARSE_FAILED, "empty"),
        ("a = 1 OR " * 500 + "a = 2", "SQL92", ResponseCode.SUBSCRIPTION_PARSE_FAILED, "long"),
        ("(" * 60 + "a = 1" + ")" * 60, "SQL92", ResponseCode.SUBSCRIPTION_PARSE_FAILED, "deeper"),
        ("a = 1", "XPATH", ResponseCode.SUBSCRIPTION_PARSE_FAILED, "not supported"),
        ("a = 1", "sql92", ResponseCode.SUBSCRIPTION_PARSE_FAILED, "not supported"),
    ],
)
async def test_bad_sql92_pulls_are_refused(
    broker: RunningBroker, sent: None, case: tuple[str, str, int, str]
) -> None:
    expression, kind, code, remark = case
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe(TOPIC)
        with pytest.raises(SendError) as refused:
            await consumer.pull(TOPIC, 0, 0, expression=expression, expression_type=kind)
        assert refused.value.code == code
        assert remark in (refused.value.remark or "")
        # the connection serves on
        assert (await consumer.pull(TOPIC, 0, 0, expression="*")).found


async def test_a_heartbeat_subscription_that_does_not_compile_refuses_its_pulls(
    broker: RunningBroker, sent: None
) -> None:
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe(TOPIC, "a >>> 1", "SQL92")
        with pytest.raises(SendError) as refused:
            await consumer.pull(TOPIC, 0, 0)
        assert refused.value.code == ResponseCode.FILTER_DATA_NOT_EXIST
        assert "unexpected '>'" in (refused.value.remark or "")


async def check_client_config(
    consumer: PullConsumer, body: dict[str, object] | None
) -> RemotingCommand:
    raw = None if body is None else json.dumps(body).encode()
    command = RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, {}, body=raw)
    return await consumer.connection.request(command)


def config_body(expression: str, kind: str) -> dict[str, object]:
    subscription = {"topic": TOPIC, "subString": expression, "expressionType": kind}
    return {"clientId": "sql@1", "group": GROUP, "subscriptionData": subscription}


async def test_check_client_config_compiles_the_expression(broker: RunningBroker) -> None:
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        good = await check_client_config(consumer, config_body("a BETWEEN 1 AND 3", "SQL92"))
        assert good.code == ResponseCode.SUCCESS
        bad = await check_client_config(consumer, config_body("a BETWEEN 3 AND 1", "SQL92"))
        assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "low bound of BETWEEN" in (bad.remark or "")
        tag = await check_client_config(consumer, config_body("TagA || TagB", "TAG"))
        assert tag.code == ResponseCode.SUCCESS
        assert (await check_client_config(consumer, None)).code == ResponseCode.SUCCESS
        assert (await check_client_config(consumer, {"clientId": "x"})).code == ResponseCode.SUCCESS
        command = RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, {}, body=b"{not json")
        broken = await consumer.connection.request(command)
        assert broken.code == ResponseCode.SYSTEM_ERROR and "not valid JSON" in (
            broken.remark or ""
        )


async def test_without_property_filtering_sql92_is_refused(tmp_path: pathlib.Path) -> None:
    """4.9's default: enablePropertyFilter false. The expression is still checked first."""
    async with trio.open_nursery() as nursery:
        broker = await start_broker(nursery, make_config(tmp_path / "off"))
        try:
            async with open_producer("127.0.0.1", broker.port) as producer:
                await producer.send(Message(TOPIC, b"1", properties={"a": "1"}, queue_id=0))
            async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
                await consumer.subscribe(TOPIC, "a = 1", "SQL92")
                for pull in (
                    consumer.pull(TOPIC, 0, 0, expression="a = 1", expression_type="SQL92"),
                    consumer.pull(TOPIC, 0, 0),  # the heartbeat's subscription
                ):
                    with pytest.raises(SendError) as refused:
                        await pull
                    assert refused.value.code == ResponseCode.SYSTEM_ERROR
                    assert refused.value.remark == (
                        "The broker does not support consumer to filter message by SQL92"
                    )
                with pytest.raises(SendError) as bad:
                    await consumer.pull(TOPIC, 0, 0, expression="a =", expression_type="SQL92")
                assert bad.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
                checked = await check_client_config(consumer, config_body("a = 1", "SQL92"))
                assert checked.code == ResponseCode.SYSTEM_ERROR
                assert "filter message by SQL92" in (checked.remark or "")
                # TAG subscriptions are served as ever
                assert (await consumer.pull(TOPIC, 0, 0, expression="*")).found
        finally:
            await broker.stop()


HOSTILE_BODIES = [
    b"[]",
    b"\xff\xfe",
    b'{"subscriptionData": 5}',
    b'{"subscriptionData": {"topic": 5}}',
    b'{"subscriptionData": {"topic": "t", "expressionType": 7}}',
    b'{"subscriptionData": {"topic": "t", "subString": null, "expressionType": "SQL92"}}',
    b'{"subscriptionData": {"topic": "t", "subString": "a > 1", "expressionType": null}}',
    b'{"group": [], "subscriptionData": {"topic": "t", "subString": "a", '
    b'"expressionType": "SQL92"}}',
    b'{"subscriptionData": {"topic": "t", "subString": "'
    + b"(" * 3000
    + b'", "expressionType": "SQL92"}}',
    rb'{"subscriptionData": {"topic": "t", "subString": "a \u0000 b", "expressionType": "SQL92"}}',
]


async def test_hostile_check_client_config_bodies_are_answered(broker: RunningBroker) -> None:
    """Each gets a code and a remark from the checks, none reaches the dispatcher's catch-all,
    and the connection serves on."""
    with structlog.testing.capture_logs() as logs:
        async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
            for body in HOSTILE_BODIES:
                command = RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, {}, body=body)
                answer = await consumer.connection.request(command)
                assert answer.code in (
                    ResponseCode.SUCCESS,  # a null expression type is TAG, as in 4.9
                    ResponseCode.SYSTEM_ERROR,
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                ), body
                assert answer.code == ResponseCode.SUCCESS or answer.remark, body
            good = await check_client_config(consumer, config_body("a = 1", "SQL92"))
            assert good.code == ResponseCode.SUCCESS
    assert [e for e in logs if e.get("event") == "processor_failed"] == []
