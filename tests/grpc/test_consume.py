"""The consumer RPCs of RocketMQ 5 answered in process over a running broker (messages sent by
the 4.x remoting producer over loopback): what a receive streams and in which order, the
system properties a 5.x client reads, long polling woken by an arrival and bounded by the
deadline, acks per entry, a change of invisible duration, the dead letter queue at the
consumer's word, assignments, and each refusal's 5.x code."""

from __future__ import annotations

import hashlib
import pathlib

import trio

from broker.context import BrokerContext
from broker.grpc.sessions import SessionService
from protocol.admin_group import SubscriptionGroupConfig
from protocol.v2 import load
from rmq_client.producer import Message, Producer
from tests.conftest import RunningBroker, make_config, start_broker
from tests.grpc.consume_calls import (
    GROUP,
    TOPIC,
    Received,
    ack,
    call_context,
    change,
    code,
    receive,
    receive_until,
    resource,
    unary,
)


def context_of(broker: RunningBroker) -> BrokerContext:
    return broker.server.broker


async def test_a_receive_streams_status_messages_then_delivery_time_and_acks_remove_them(
    broker: RunningBroker, producer: Producer
) -> None:
    sent = await producer.send(
        Message(TOPIC, b"one", tags="TagA", keys=["k1", "k2"], properties={"color": "red"})
    )
    await producer.send(Message(TOPIC, b"two", tags="TagB"))
    ctx = context_of(broker)
    got = await receive(ctx)
    assert got.status.code == code("OK")
    assert got.order == ["status", "message", "message", "delivery_timestamp"]
    first = next(m for m in got.messages if m.body == b"one")
    system = first.system_properties
    assert first.topic.name == TOPIC
    assert system.message_id == sent.msg_id
    assert system.tag == "TagA"
    assert list(system.keys) == ["k1", "k2"]
    assert dict(first.user_properties) == {"color": "red"}
    assert system.delivery_attempt == 1
    assert system.queue_id == sent.queue_id
    assert system.queue_offset == sent.queue_offset
    assert system.body_digest.type == load()[0].DigestType.Value("MD5")
    assert system.body_digest.checksum == hashlib.md5(b"one").hexdigest().upper()
    assert system.invisible_duration.seconds == 60
    assert system.receipt_handle
    assert system.born_timestamp.seconds > 0
    assert system.store_timestamp.seconds > 0
    # both are in flight: nothing more to receive
    again = await receive(ctx)
    assert again.status.code == code("MESSAGE_NOT_FOUND")
    assert again.messages == []
    answer = await ack(
        ctx,
        *[
            (m.system_properties.message_id, m.system_properties.receipt_handle)
            for m in got.messages
        ],
    )
    assert answer.status.code == code("OK")
    assert [e.status.code for e in answer.entries] == [code("OK")] * 2
    pop = ctx.pop
    assert pop is not None
    assert pop.inflight == {}


async def test_long_polling_is_woken_by_an_arrival(
    broker: RunningBroker, producer: Producer
) -> None:
    await producer.send(Message(TOPIC, b"make the topic"))
    ctx = context_of(broker)
    await ack(
        ctx,
        *[
            (m.system_properties.message_id, m.system_properties.receipt_handle)
            for m in (await receive(ctx)).messages
        ],
    )
    result = []

    async def held() -> None:
        result.append(await receive(ctx, polling_ms=20_000))

    with trio.fail_after(10):  # far below the 20 s poll: only an arrival ends it
        async with trio.open_nursery() as nursery:
            nursery.start_soon(held)
            await trio.sleep(0.3)
            assert result == []  # held, not answered at once
            await producer.send(Message(TOPIC, b"late"))
    assert [m.body for m in result[0].messages] == [b"late"]


async def test_long_polling_ends_before_the_call_deadline(
    broker: RunningBroker, producer: Producer
) -> None:
    await producer.send(Message(TOPIC, b"x"))
    ctx = context_of(broker)
    await receive(ctx)  # x is in flight now
    with trio.fail_after(10):
        got = await receive(ctx, polling_ms=30_000, deadline=trio.current_time() + 1.5)
    assert got.status.code == code("MESSAGE_NOT_FOUND")


async def test_a_clients_termination_answers_the_receives_it_holds_and_no_others(
    broker: RunningBroker, producer: Producer
) -> None:
    """NotifyClientTermination ends the long polling of the receives that client holds on that
    connection (a PushConsumer's shutdown waits for them); another client's, or the same client
    id's on another connection, stay held until a message comes."""
    await producer.send(Message(TOPIC, b"make the topic"))
    ctx = context_of(broker)
    await receive(ctx, invisible_ms=60_000)  # the topic's only message is in flight now
    _, service = load()
    terminate = SessionService(ctx).notify_client_termination
    done: dict[str, Received] = {}
    answered = {name: trio.Event() for name in ("leaving", "leaving@other-conn", "staying")}

    async def held(name: str, conn_id: int) -> None:
        done[name] = await receive(
            ctx, polling_ms=25_000, conn_id=conn_id, client_id=name.split("@", maxsplit=1)[0]
        )
        answered[name].set()

    with trio.fail_after(10):  # far below the 25 s poll
        async with trio.open_nursery() as nursery:
            for name, conn_id in (("leaving", 1), ("leaving@other-conn", 2), ("staying", 1)):
                nursery.start_soon(held, name, conn_id)
            await trio.sleep(0.3)
            assert done == {}
            bye = await terminate(
                service.NotifyClientTerminationRequest(),
                call_context(conn_id=1, client_id="leaving"),
            )
            assert bye.status.code == code("OK")
            await answered["leaving"].wait()
            await trio.sleep(0.3)
            assert set(done) == {"leaving"}
            # two messages: one receive may take both, so send again until both are answered
            for n in range(20):
                await producer.send(Message(TOPIC, b"late %d" % n))
                with trio.move_on_after(0.2):
                    await answered["staying"].wait()
                    await answered["leaving@other-conn"].wait()
                    break
    assert done["leaving"].status.code == code("MESSAGE_NOT_FOUND")
    assert done["leaving"].messages == []
    assert done["staying"].messages and done["leaving@other-conn"].messages


async def test_an_unacked_message_comes_back_with_delivery_attempt_two(
    broker: RunningBroker, producer: Producer
) -> None:
    await producer.send(Message(TOPIC, b"again"))
    ctx = context_of(broker)
    first = await receive(ctx, invisible_ms=1_000)
    assert [m.body for m in first.messages] == [b"again"]
    second = await receive_until(ctx, 15)
    assert [m.body for m in second.messages] == [b"again"]
    one, two = first.messages[0].system_properties, second.messages[0].system_properties
    assert two.delivery_attempt == 2
    assert two.message_id == one.message_id
    assert two.receipt_handle != one.receipt_handle
    lapsed = await ack(ctx, (one.message_id, one.receipt_handle))
    assert lapsed.status.code == code("INVALID_RECEIPT_HANDLE")  # handed on: acks nothing
    answer = await ack(ctx, (two.message_id, two.receipt_handle))
    assert answer.status.code == code("OK")


async def test_change_invisible_duration_gives_a_new_receipt_and_refusals_have_codes(
    broker: RunningBroker, producer: Producer
) -> None:
    await producer.send(Message(TOPIC, b"slow"))
    ctx = context_of(broker)
    message = (await receive(ctx, invisible_ms=1_000)).messages[0]
    old = message.system_properties.receipt_handle
    changed = await change(ctx, message, old, 60_000)
    assert changed.status.code == code("OK")
    assert changed.receipt_handle and changed.receipt_handle != old
    # the old handle names nothing in flight any more
    stale = await change(ctx, message, old, 60_000)
    assert stale.status.code == code("INVALID_RECEIPT_HANDLE")
    too_long = await change(ctx, message, changed.receipt_handle, 12 * 3600 * 1000 + 1)
    assert too_long.status.code == code("ILLEGAL_INVISIBLE_TIME")
    # past the first invisible second the message stays hidden under its new receipt
    await trio.sleep(2.5)
    assert (await receive(ctx)).status.code == code("MESSAGE_NOT_FOUND")
    done = await ack(ctx, (message.system_properties.message_id, changed.receipt_handle))
    assert done.status.code == code("OK")


async def test_ack_answers_each_entry(broker: RunningBroker, producer: Producer) -> None:
    await producer.send(Message(TOPIC, b"a"))
    ctx = context_of(broker)
    message = (await receive(ctx)).messages[0]
    system = message.system_properties
    mixed = await ack(ctx, (system.message_id, system.receipt_handle), ("bad", "not a receipt"))
    assert mixed.status.code == code("MULTIPLE_RESULTS")
    assert [e.status.code for e in mixed.entries] == [code("OK"), code("INVALID_RECEIPT_HANDLE")]
    assert mixed.entries[1].message_id == "bad"
    bad = await ack(ctx, ("bad", "0 0 0 0 0 other-broker 0 0"))
    assert bad.status.code == code("INVALID_RECEIPT_HANDLE")


async def test_forward_to_dead_letter_queue_stores_it_there_and_it_never_comes_back(
    broker: RunningBroker, producer: Producer
) -> None:
    await producer.send(Message(TOPIC, b"poison", tags="T"))
    ctx = context_of(broker)
    message = (await receive(ctx, invisible_ms=1_000)).messages[0]
    system = message.system_properties
    answer = await unary(
        ctx,
        "ForwardMessageToDeadLetterQueue",
        group=resource(GROUP),
        topic=resource(TOPIC),
        receipt_handle=system.receipt_handle,
        message_id=system.message_id,
        delivery_attempt=1,
        max_delivery_attempts=1,
    )
    assert answer.status.code == code("OK")
    dead = await receive(ctx, group="dlq-reader", topic=f"%DLQ%{GROUP}")
    assert [m.body for m in dead.messages] == [b"poison"]
    assert dead.messages[0].system_properties.message_id == system.message_id
    await trio.sleep(2.5)  # past its invisible time: acknowledged, so not revived
    assert (await receive(ctx)).status.code == code("MESSAGE_NOT_FOUND")
    twice = await unary(
        ctx,
        "ForwardMessageToDeadLetterQueue",
        group=resource(GROUP),
        topic=resource(TOPIC),
        receipt_handle=system.receipt_handle,
    )
    assert twice.status.code == code("INVALID_RECEIPT_HANDLE")


async def test_query_assignment_names_the_whole_topic_on_this_broker(
    broker: RunningBroker, producer: Producer
) -> None:
    await producer.send(Message(TOPIC, b"x"))
    ctx = context_of(broker)
    definition, _ = load()
    endpoints = definition.Endpoints(addresses=[definition.Address(host="127.0.0.1", port=8081)])
    answer = await unary(
        ctx, "QueryAssignment", topic=resource(TOPIC), group=resource(GROUP), endpoints=endpoints
    )
    assert answer.status.code == code("OK")
    [assignment] = answer.assignments
    queue = assignment.message_queue
    assert (queue.topic.name, queue.id) == (TOPIC, -1)
    assert queue.broker.name == broker.config.broker_name
    assert queue.broker.endpoints == endpoints
    missing = await unary(
        ctx, "QueryAssignment", topic=resource("NoSuchTopic"), group=resource(GROUP)
    )
    assert missing.status.code == code("TOPIC_NOT_FOUND")


async def test_filters_and_refusals_of_a_receive(broker: RunningBroker, producer: Producer) -> None:
    await producer.send(Message(TOPIC, b"a", tags="TagA"))
    await producer.send(Message(TOPIC, b"b", tags="TagB"))
    ctx = context_of(broker)
    tagged = await receive(ctx, expression="TagB")
    assert [m.body for m in tagged.messages] == [b"b"]
    # SQL92 is served without enable_property_filter too, as 5.x's pop serves it (more in
    # tests/grpc/test_consume_sql.py)
    sql = await receive(ctx, group="sql-group", filter_type="SQL", expression="TAGS = 'TagA'")
    assert [m.body for m in sql.messages] == [b"a"]
    missing = await receive(ctx, topic="NoSuchTopic")
    assert missing.status.code == code("TOPIC_NOT_FOUND")
    short = await receive(ctx, group="other", invisible_ms=10)
    assert short.status.code == code("ILLEGAL_INVISIBLE_TIME")
    nameless = await receive(ctx, group="")
    assert nameless.status.code == code("ILLEGAL_CONSUMER_GROUP")


async def test_a_receive_pops_every_queue_whichever_it_names(
    broker: RunningBroker, producer: Producer
) -> None:
    """As the 5.x proxy: a SimpleConsumer names one queue of its route per receive, and is
    answered from all of them (a stale route's queue id past the topic's is no refusal)."""
    for queue_id in range(4):
        await producer.send(Message(TOPIC, f"q{queue_id}".encode(), queue_id=queue_id))
    ctx = context_of(broker)
    got = await receive(ctx, queue_id=2)
    assert sorted(m.body for m in got.messages) == [b"q0", b"q1", b"q2", b"q3"]
    assert sorted(m.system_properties.queue_id for m in got.messages) == [0, 1, 2, 3]
    await producer.send(Message(TOPIC, b"later", queue_id=0))
    stale = await receive(ctx, queue_id=99)
    assert [m.body for m in stale.messages] == [b"later"]


async def test_a_held_receive_wakes_for_a_message_revived_into_a_new_retry_topic(
    broker: RunningBroker, producer: Producer
) -> None:
    """The group's pop retry topic does not exist when the receive starts waiting: the revived
    message that creates it still ends the wait, long before the polling time."""
    await producer.send(Message(TOPIC, b"again"))
    ctx = context_of(broker)
    first = await receive(ctx, invisible_ms=1_000)
    assert [m.body for m in first.messages] == [b"again"]
    with trio.fail_after(10):  # the poll asked for is 25 s
        held = await receive(ctx, polling_ms=25_000)
    [again] = held.messages
    assert (again.body, again.system_properties.delivery_attempt) == (b"again", 2)


async def test_concurrent_receives_of_one_group_never_hand_a_message_out_twice(
    broker: RunningBroker, producer: Producer
) -> None:
    for i in range(40):
        await producer.send(Message(TOPIC, f"m{i}".encode(), queue_id=0))
    ctx = context_of(broker)
    got: list[tuple[int, int]] = []

    async def one() -> None:
        for m in (await receive(ctx, batch=8)).messages:
            got.append((m.system_properties.queue_id, m.system_properties.queue_offset))

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(one)
    assert len(got) == len(set(got)) == 32


async def test_a_fifo_group_gets_a_queue_in_order_with_its_own_attempt_count(
    broker: RunningBroker, producer: Producer
) -> None:
    ctx = context_of(broker)
    ctx.groups.put(SubscriptionGroupConfig(GROUP, consume_message_orderly=True))
    for body in (b"m1", b"m2", b"m3"):
        await producer.send(Message(TOPIC, body, queue_id=0))
    first = await receive(ctx, batch=1)
    [m1] = first.messages
    assert (m1.body, m1.system_properties.delivery_attempt) == (b"m1", 1)
    assert (await receive(ctx)).status.code == code("MESSAGE_NOT_FOUND")  # m2 waits for m1
    held = []

    async def hold() -> None:
        held.append(await receive(ctx, batch=1, invisible_ms=1_000, polling_ms=20_000))

    with trio.fail_after(10):  # far below the poll: the ack wakes the held receive
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold)
            await trio.sleep(0.3)
            assert held == []
            system = m1.system_properties
            await ack(ctx, (system.message_id, system.receipt_handle))
    [m2] = held[0].messages
    assert (m2.body, m2.system_properties.delivery_attempt) == (b"m2", 1)
    # m2 not acked: it comes back, before m3, counted by the FIFO pop
    again = await receive_until(ctx, 15, batch=1)
    [m2_again] = again.messages
    assert (m2_again.body, m2_again.system_properties.delivery_attempt) == (b"m2", 2)


def test_the_orderly_flag_of_a_group_config_round_trips_and_is_left_out_when_unset() -> None:
    orderly = SubscriptionGroupConfig("g", consume_message_orderly=True)
    assert SubscriptionGroupConfig.from_json(orderly.to_json()) == orderly
    assert "consumeMessageOrderly" not in SubscriptionGroupConfig("g").to_json()


async def test_a_broker_that_is_not_readable_refuses_receives(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    running = await start_broker(nursery, make_config(tmp_path / "store", broker_permission=2))
    try:
        got = await receive(context_of(running))
        assert got.status.code == code("FORBIDDEN")
        assert got.order == ["status"]
    finally:
        await running.stop()
