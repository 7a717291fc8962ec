"""Pops with a SQL92 filter (5.x's `expType` SQL92) against a real broker over loopback: only
the messages whose properties match are handed out, the others are skipped for the group, a
matching message left unacknowledged comes back from the pop retry topic through the same
filter; a bad expression and a broker without property filtering refuse the pop."""

from __future__ import annotations

import pathlib

import pytest
import trio

from broker.config import BrokerConfig
from protocol.codes import ResponseCode
from rmq_client.producer import Message, Producer, open_producer
from tests.conftest import RunningBroker, make_config, start_broker
from tests.pop.client import Popped, ack, pop, pop_raw

GROUP = "sql-pop-group"
TOPIC = "SqlPop"


@pytest.fixture
def broker_config(tmp_path: pathlib.Path) -> BrokerConfig:
    return make_config(tmp_path / "store", enable_property_filter=True)


async def send(producer: Producer, price: int, region: str) -> None:
    body = f"{region}-{price}".encode()
    properties = {"price": str(price), "region": region}
    await producer.send(Message(TOPIC, body, properties=properties, queue_id=0))


def bodies(popped: list[Popped]) -> list[bytes]:
    return [m.body for m in popped]


async def test_a_sql92_pop_hands_out_only_matching_messages(
    broker: RunningBroker, producer: Producer
) -> None:
    for price, region in [(5, "eu"), (50, "eu"), (50, "us"), (500, "eu"), (7, "asia")]:
        await send(producer, price, region)
    sql = "price >= 10 AND region IN ('eu', 'asia')"
    got = await pop(producer, GROUP, TOPIC, exp=sql, exp_type="SQL92", invisible_ms=1_000)
    assert bodies(got) == [b"eu-50", b"eu-500"]
    await ack(producer, GROUP, TOPIC, got[1])
    # eu-50 is not acknowledged: after its invisible time it comes back through the filter
    with trio.fail_after(15):
        while True:
            again = await pop(producer, GROUP, TOPIC, exp=sql, exp_type="SQL92")
            if again:
                break
            await trio.sleep(0.2)
    assert bodies(again) == [b"eu-50"]
    assert again[0].receipt.split(" ")[4] == "1"  # from the pop retry topic
    await ack(producer, GROUP, TOPIC, again[0])
    # the skipped ones are past the group's offset; another group's filter sees them
    asia = await pop(producer, "other", TOPIC, exp="region = 'asia'", exp_type="SQL92")
    assert bodies(asia) == [b"asia-7"]


@pytest.mark.parametrize(
    ("exp", "exp_type", "remark"),
    [
        ("price >", "SQL92", "unexpected the end"),
        ("price = NULL", "SQL92", "IS NULL"),
        ("price > 1", "JSON", "not supported"),
    ],
)
async def test_bad_sql92_pops_are_refused(
    broker: RunningBroker, producer: Producer, exp: str, exp_type: str, remark: str
) -> None:
    await send(producer, 1, "eu")
    response = await pop_raw(producer, GROUP, TOPIC, exp=exp, exp_type=exp_type)
    assert response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert remark in (response.remark or "")
    assert bodies(await pop(producer, GROUP, TOPIC)) == [b"eu-1"]  # nothing was handed out


async def test_a_sql92_pop_is_served_without_property_filtering(tmp_path: pathlib.Path) -> None:
    """5.x's pop serves SQL92 whatever enablePropertyFilter says; the switch is 4.9's, for
    pulls."""
    async with trio.open_nursery() as nursery:
        broker = await start_broker(nursery, make_config(tmp_path / "off"))
        try:
            async with open_producer("127.0.0.1", broker.port) as producer:
                await send(producer, 1, "eu")
                await send(producer, 2, "us")
                selected = await pop(producer, GROUP, TOPIC, exp="price = 2", exp_type="SQL92")
                assert bodies(selected) == [b"us-2"]
                everything = await pop(producer, "tag-group", TOPIC)  # another group: untouched
                assert bodies(everything) == [b"eu-1", b"us-2"]
        finally:
            await broker.stop()
