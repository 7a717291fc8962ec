"""Auto renew in process: a message received with `auto_renew` by a client whose session
lives stays invisible over several invisible periods, an ack under the handle the client
received still acknowledges it after renewals, so does a change of invisible duration (which
ends the renewing), and once the session ends the message comes back (the renewal table drops
the client's handles)."""

from __future__ import annotations

from typing import Any

import trio

from broker.context import BrokerContext
from broker.grpc.consume import consume_methods
from broker.grpc.methods import CallContext, path
from broker.grpc.renew import renewals
from broker.pop.service import PopService
from protocol.v2 import load
from rmq_client.producer import Message, Producer
from tests.conftest import RunningBroker
from tests.grpc.consume_calls import GROUP, TOPIC, code, receive, receive_until, resource

CLIENT = "renew-client@1"


def pop_of(ctx: BrokerContext) -> PopService:
    assert ctx.pop is not None
    return ctx.pop


def shorten(ctx: BrokerContext) -> None:
    table = renewals(pop_of(ctx))
    table.invisible_ms, table.ahead_ms, table.every_s = 2_000, 1_500, 0.2


async def call(ctx: BrokerContext, rpc: str, request: Any) -> Any:
    context = CallContext(conn_id=1, peer="127.0.0.1:1", metadata={"x-mq-client-id": CLIENT})
    handler: Any = consume_methods(ctx)[path(rpc)].handler
    if rpc == "ReceiveMessage":
        return [r async for r in handler(request, context)]
    return await handler(request, context)


async def renewed_receive(ctx: BrokerContext) -> Any:
    definition, service = load()
    request = service.ReceiveMessageRequest(
        group=resource(GROUP),
        message_queue=definition.MessageQueue(topic=resource(TOPIC), id=-1),
        filter_expression=definition.FilterExpression(
            type=definition.FilterType.Value("TAG"), expression="*"
        ),
        batch_size=1,
        auto_renew=True,
    )
    request.long_polling_timeout.seconds = 5
    answers = await call(ctx, "ReceiveMessage", request)
    messages = [a.message for a in answers if a.WhichOneof("content") == "message"]
    assert len(messages) == 1
    return messages[0]


async def nothing_for(ctx: BrokerContext, seconds: float) -> None:
    """No other receive gets a message for `seconds`."""
    with trio.move_on_after(seconds):
        while True:
            got = await receive(ctx, polling_ms=1_000)
            assert got.messages == []


async def test_a_held_message_stays_invisible_and_acks_under_its_first_handle(
    broker: RunningBroker, producer: Producer
) -> None:
    ctx = broker.server.broker
    shorten(ctx)
    await producer.send(Message(TOPIC, b"held"))
    async with trio.open_nursery() as session:
        assert ctx.pop is not None
        session.start_soon(renewals(pop_of(ctx)).keep, CLIENT, ctx.pop)
        message = await renewed_receive(ctx)
        first = message.system_properties.receipt_handle
        await nothing_for(ctx, 7)  # over three invisible periods
        assert renewals(pop_of(ctx)).current(CLIENT, first) != first  # renewed meanwhile
        _, service = load()
        entry = service.AckMessageEntry(
            message_id=message.system_properties.message_id, receipt_handle=first
        )
        request = service.AckMessageRequest(
            group=resource(GROUP), topic=resource(TOPIC), entries=[entry]
        )
        answer = await call(ctx, "AckMessage", request)
        assert answer.status.code == code("OK")
        assert renewals(pop_of(ctx)).count == 0
        session.cancel_scope.cancel()
    await nothing_for(ctx, 5)


async def test_a_change_under_the_first_handle_after_renewals_is_the_clients_choice(
    broker: RunningBroker, producer: Producer
) -> None:
    # a push consumer's listener failed after a renewal: the client changes the invisible
    # duration (to 0 s, the Node.js client's choice) under the handle it received
    ctx = broker.server.broker
    shorten(ctx)
    await producer.send(Message(TOPIC, b"failed"))
    table = renewals(pop_of(ctx))
    async with trio.open_nursery() as session:
        assert ctx.pop is not None
        session.start_soon(table.keep, CLIENT, ctx.pop)
        message = await renewed_receive(ctx)
        first = message.system_properties.receipt_handle
        with trio.fail_after(10):
            while table.current(CLIENT, first) == first:  # noqa: ASYNC110
                await trio.sleep(0.1)
        _, service = load()
        request = service.ChangeInvisibleDurationRequest(
            group=resource(GROUP),
            topic=resource(TOPIC),
            receipt_handle=first,
            message_id=message.system_properties.message_id,
        )
        answer = await call(ctx, "ChangeInvisibleDuration", request)
        assert answer.status.code == code("OK")
        assert table.count == 0  # renewed no more: back at once, though the session lives
        again = await receive_until(ctx, 10)
        assert [m.body for m in again.messages] == [b"failed"]
        assert again.messages[0].system_properties.delivery_attempt == 2
        session.cancel_scope.cancel()


async def test_a_message_comes_back_once_its_session_ends(
    broker: RunningBroker, producer: Producer
) -> None:
    ctx = broker.server.broker
    shorten(ctx)
    await producer.send(Message(TOPIC, b"dropped"))
    async with trio.open_nursery() as session:
        assert ctx.pop is not None
        session.start_soon(renewals(pop_of(ctx)).keep, CLIENT, ctx.pop)
        message = await renewed_receive(ctx)
        assert message.body == b"dropped"
        await nothing_for(ctx, 4)
        session.cancel_scope.cancel()
    assert renewals(pop_of(ctx)).count == 0
    again = await receive_until(ctx, 20)
    assert [m.body for m in again.messages] == [b"dropped"]
