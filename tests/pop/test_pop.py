"""Pop consumption against a real broker over loopback, with 5.x's remoting headers: messages
handed out are hidden for their invisible time, ACK removes them, a change of invisible time
extends it under a new receipt handle, an unacknowledged message comes back with one more
reconsume time and, past the group's retryMaxTimes, goes to its DLQ; refusals carry a code and
a remark."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import trio

from protocol.admin_group import SubscriptionGroupConfig
from protocol.codes import ResponseCode
from protocol.properties import decode_properties
from rmq_client.producer import Message, Producer, open_producer
from tests.conftest import RunningBroker
from tests.pop.client import PopError, Popped, ack, ack_receipt, change_invisible, pop, pop_raw

GROUP = "pop-group"
TOPIC = "PopWork"


async def send(producer: Producer, *bodies: bytes, tags: str | None = None) -> None:
    for body in bodies:
        await producer.send(Message(TOPIC, body, tags=tags, queue_id=0))


async def pop_until(
    conn: Producer, timeout_s: float, group: str = GROUP, **options: Any
) -> list[Popped]:
    with trio.fail_after(timeout_s):
        while True:
            got = await pop(conn, group, TOPIC, **options)
            if got:
                return got
            await trio.sleep(0.1)


async def test_popped_messages_carry_receipts_and_stay_hidden_until_acked(
    broker: RunningBroker, producer: Producer
) -> None:
    await send(producer, b"a", b"b", b"c")
    got = await pop(producer, GROUP, TOPIC, max_nums=2, invisible_ms=60_000)
    assert [m.body for m in got] == [b"a", b"b"]
    assert all(m.record.topic == TOPIC for m in got)
    assert all(m.receipt.split(" ")[5] == broker.config.broker_name for m in got)
    rest = await pop(producer, GROUP, TOPIC, invisible_ms=60_000)
    assert [m.body for m in rest] == [b"c"]
    assert await pop(producer, GROUP, TOPIC) == []  # all three are in flight
    for message in got + rest:
        await ack(producer, GROUP, TOPIC, message)
    pop_service = broker.server.broker.pop
    assert pop_service is not None
    assert pop_service.inflight == {}
    # another group gets them all: pop offsets are per group
    others = await pop(producer, "other-group", TOPIC)
    assert sorted(m.body for m in others) == [b"a", b"b", b"c"]


async def test_an_unacked_message_comes_back_with_one_more_reconsume_time(
    broker: RunningBroker, producer: Producer
) -> None:
    await send(producer, b"keep", b"drop")
    first = await pop(producer, GROUP, TOPIC, invisible_ms=1_000)
    assert [m.body for m in first] == [b"keep", b"drop"]
    await ack(producer, GROUP, TOPIC, first[0])
    again = await pop_until(producer, 10, invisible_ms=60_000)
    assert [m.body for m in again] == [b"drop"]
    assert again[0].record.reconsume_times == 1
    assert again[0].record.topic == TOPIC
    props = decode_properties(again[0].record.properties)
    assert props["RETRY_TOPIC"] == TOPIC
    assert again[0].receipt.split(" ")[4] == "1"  # read from the pop retry topic
    await ack(producer, GROUP, TOPIC, again[0])
    await trio.sleep(1.5)
    assert await pop(producer, GROUP, TOPIC) == []  # the acked keep never came back


async def test_changing_the_invisible_time_extends_it_under_a_new_receipt(
    broker: RunningBroker, producer: Producer
) -> None:
    await send(producer, b"slow")
    [message] = await pop(producer, GROUP, TOPIC, invisible_ms=1_000)
    receipt = await change_invisible(producer, GROUP, TOPIC, message, 60_000)
    assert receipt != message.receipt
    await trio.sleep(2.0)  # the first invisible time has passed
    assert await pop(producer, GROUP, TOPIC) == []
    with pytest.raises(PopError) as refused:  # the old receipt is spent
        await change_invisible(producer, GROUP, TOPIC, message, 60_000)
    assert refused.value.code == ResponseCode.NO_MESSAGE
    await ack_receipt(
        producer, GROUP, TOPIC, queue_id=message.queue_id, offset=message.offset, receipt=receipt
    )
    pop_service = broker.server.broker.pop
    assert pop_service is not None
    assert pop_service.inflight == {}


async def test_a_change_to_no_invisible_time_makes_the_message_visible_at_once(
    broker: RunningBroker, producer: Producer
) -> None:
    # what a 5.x push consumer without a backoff asks after a failure (the Node.js client reads
    # none from a customized one); 5.x's proxy and broker allow it
    await send(producer, b"failed")
    [message] = await pop(producer, GROUP, TOPIC, invisible_ms=60_000)
    await change_invisible(producer, GROUP, TOPIC, message, 0)
    again = await pop_until(producer, 10, invisible_ms=60_000)  # long before its first 60 s
    assert [m.body for m in again] == [b"failed"]
    assert again[0].record.reconsume_times == 1


async def test_past_the_groups_retry_max_times_a_message_goes_to_the_dlq(
    broker: RunningBroker, producer: Producer
) -> None:
    context = broker.server.broker
    context.groups.put(SubscriptionGroupConfig(GROUP, retry_max_times=1))
    await send(producer, b"poison")
    await pop(producer, GROUP, TOPIC, invisible_ms=1_000)
    retried = await pop_until(producer, 10, invisible_ms=1_000)
    assert retried[0].record.reconsume_times == 1
    consume = context.consume
    assert consume is not None
    with trio.fail_after(10):
        while consume.max_offset_in_queue(f"%DLQ%{GROUP}", 0) == 0:  # noqa: ASYNC110
            await trio.sleep(0.1)
    await trio.sleep(1.5)
    assert await pop(producer, GROUP, TOPIC) == []  # not delivered again


async def test_a_held_pop_answers_when_a_message_arrives(
    broker: RunningBroker, producer: Producer
) -> None:
    await send(producer, b"first")
    await pop(producer, GROUP, TOPIC)  # the topic exists, the queue is drained
    got: list[Popped] = []

    async def held() -> None:
        got.extend(await pop(producer, GROUP, TOPIC, poll_ms=15_000))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(held)
        await trio.sleep(0.3)
        async with open_producer("127.0.0.1", broker.port) as other:
            await send(other, b"later")
    assert [m.body for m in got] == [b"later"]


async def test_a_tag_filter_skips_other_tags(broker: RunningBroker, producer: Producer) -> None:
    await send(producer, b"x", tags="TagX")
    await send(producer, b"y", tags="TagY")
    got = await pop(producer, GROUP, TOPIC, exp="TagY")
    assert [m.body for m in got] == [b"y"]


@pytest.mark.parametrize(
    ("options", "code", "remark"),
    [
        ({"max_nums": 33}, ResponseCode.INVALID_PARAMETER, "not within 1..32"),
        ({"max_nums": 0}, ResponseCode.INVALID_PARAMETER, "not within 1..32"),
        ({"invisible_ms": 0}, ResponseCode.INVALID_PARAMETER, "invisibleTime 0 ms"),
        ({"invisible_ms": 12 * 3600 * 1000 + 1}, ResponseCode.INVALID_PARAMETER, "invisibleTime"),
        ({"queue_id": 99}, ResponseCode.INVALID_PARAMETER, "queueId[99] is illegal"),
        ({"queue_id": -2}, ResponseCode.INVALID_PARAMETER, "queueId[-2] is illegal"),
    ],
)
async def test_out_of_bounds_pops_are_refused_with_a_remark(
    broker: RunningBroker, producer: Producer, options: dict[str, Any], code: int, remark: str
) -> None:
    await send(producer, b"m")
    response = await pop_raw(producer, GROUP, TOPIC, **options)
    assert response.code == code
    assert remark in (response.remark or "")
    assert (await pop(producer, GROUP, TOPIC))[0].body == b"m"  # nothing was handed out


async def test_bad_topics_receipts_and_headers_are_refused(
    broker: RunningBroker, producer: Producer
) -> None:
    with pytest.raises(PopError) as refused:
        await pop(producer, GROUP, "NoSuchTopic")
    assert refused.value.code == ResponseCode.TOPIC_NOT_EXIST
    await send(producer, b"m")
    [message] = await pop(producer, GROUP, TOPIC)
    other_broker = message.receipt.replace(broker.config.broker_name, "elsewhere")
    for bad in ("", "garbage", "1 2 3 4 0 b 5", "1 2 3 4 9 b 0 0", other_broker):
        with pytest.raises(PopError) as refused:
            await ack_receipt(
                producer, GROUP, TOPIC, queue_id=0, offset=message.offset, receipt=bad
            )
        assert refused.value.code == ResponseCode.INVALID_PARAMETER, bad
    wrong_offset = dataclasses.replace(message.record, queue_offset=message.offset + 5)
    with pytest.raises(PopError, match="names queue"):
        await ack(producer, GROUP, TOPIC, Popped(wrong_offset, message.receipt))
    response = await pop_raw(producer, "bad group!", TOPIC)
    assert response.code != ResponseCode.SUCCESS
    assert response.remark
    await ack(producer, GROUP, TOPIC, message)  # the good receipt still works


async def test_without_a_possible_retry_topic_an_unacked_message_goes_to_the_dlq(
    broker: RunningBroker, producer: Producer
) -> None:
    group, topic = "g" * 100, "T" * 50  # %RETRY%<group>_<topic> would break the topic rule
    await producer.send(Message(topic, b"kept", queue_id=0))
    [message] = await pop(producer, group, topic, invisible_ms=1_000)
    assert message.body == b"kept"
    consume = broker.server.broker.consume
    assert consume is not None
    with trio.fail_after(10):
        while consume.max_offset_in_queue(f"%DLQ%{group}", 0) == 0:  # noqa: ASYNC110
            await trio.sleep(0.1)
