"""FIFO pops against a real broker: within a queue the next message is not handed out while the
one before is in flight; one not acknowledged in time is handed out again from its queue, its
count in 5.x's orderCountInfo one higher, and past the group's retryMaxTimes it goes to the DLQ
and the queue moves on."""

from __future__ import annotations

from protocol.admin_group import SubscriptionGroupConfig
from rmq_client.producer import Message, Producer
from tests.conftest import RunningBroker
from tests.pop import client
from tests.pop.client import ack, change_invisible, pop

GROUP = "fifo-group"
TOPIC = "FifoWork"


async def send(producer: Producer, *bodies: bytes) -> None:
    for body in bodies:
        await producer.send(Message(TOPIC, body, queue_id=1))


async def order_pop_until(conn: Producer, timeout_s: float) -> tuple[bytes, str]:
    return await client.order_pop_until(conn, GROUP, TOPIC, timeout_s)


async def test_the_next_message_waits_for_the_one_in_flight(
    broker: RunningBroker, producer: Producer
) -> None:
    await send(producer, b"m1", b"m2", b"m3")
    [first] = await pop(producer, GROUP, TOPIC, max_nums=1, order=True)
    assert first.body == b"m1"
    assert first.receipt.split(" ")[3] == "999"  # 5.x's reviveQid of FIFO pops
    assert await pop(producer, GROUP, TOPIC, order=True) == []  # m2 waits for m1
    await ack(producer, GROUP, TOPIC, first)
    [second] = await pop(producer, GROUP, TOPIC, max_nums=1, order=True, invisible_ms=1_000)
    assert second.body == b"m2"
    body, counts = await order_pop_until(producer, 10)  # not acked: m2 again, not m3
    assert body == b"m2"
    assert counts == f"0 qo1%{second.offset} 1"
    again = await pop(producer, GROUP, TOPIC, order=True)
    assert again == []


async def test_a_fifo_message_past_retry_max_times_goes_to_the_dlq(
    broker: RunningBroker, producer: Producer
) -> None:
    context = broker.server.broker
    context.groups.put(SubscriptionGroupConfig(GROUP, retry_max_times=1))
    await send(producer, b"poison", b"next")
    assert (await order_pop_until(producer, 10)) == (b"poison", "0 qo1%0 0")
    assert (await order_pop_until(producer, 10)) == (b"poison", "0 qo1%0 1")
    body, _counts = await order_pop_until(producer, 10)
    assert body == b"next"
    consume = context.consume
    assert consume is not None
    assert consume.max_offset_in_queue(f"%DLQ%{GROUP}", 0) == 1


async def test_a_change_of_invisible_time_keeps_a_fifo_messages_count(
    broker: RunningBroker, producer: Producer
) -> None:
    await send(producer, b"m")
    assert (await order_pop_until(producer, 10)) == (b"m", "0 qo1%0 0")
    [again] = await pop(producer, GROUP, TOPIC, order=True, invisible_ms=1_000, poll_ms=10_000)
    assert again.body == b"m"
    await change_invisible(producer, GROUP, TOPIC, again, 1_000)
    assert (await order_pop_until(producer, 10)) == (b"m", "0 qo1%0 2")
