"""Calls of the consumer RPCs' handlers for the tests, in process: protobuf requests built as a
5.x client builds them, answered by `consume_methods` over a running broker's context."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import trio

from broker.context import BrokerContext
from broker.grpc.consume import consume_methods
from broker.grpc.methods import CallContext, path
from broker.grpc.outbound import duration
from protocol.v2 import load

GROUP = "grpc-group"
TOPIC = "GrpcWork"


def call_context(
    deadline: float = math.inf, *, conn_id: int = 1, client_id: str = ""
) -> CallContext:
    metadata = {"x-mq-client-id": client_id} if client_id else {}
    return CallContext(conn_id=conn_id, peer="127.0.0.1:1", metadata=metadata, deadline=deadline)


def code(name: str) -> int:
    definition, _ = load()
    return int(definition.Code.Value(name))


@dataclass
class Received:
    status: Any
    messages: list[Any]
    #: the kind of each response in order: "status", "message", "delivery_timestamp"
    order: list[str]


async def receive(
    broker: BrokerContext,
    *,
    group: str = GROUP,
    topic: str = TOPIC,
    queue_id: int = -1,
    batch: int = 32,
    invisible_ms: int | None = 60_000,
    polling_ms: int | None = None,
    filter_type: str = "TAG",
    expression: str = "*",
    deadline: float = math.inf,
    auto_renew: bool = False,
    conn_id: int = 1,
    client_id: str = "",
) -> Received:
    definition, service = load()
    request = service.ReceiveMessageRequest(
        group=definition.Resource(name=group),
        message_queue=definition.MessageQueue(topic=definition.Resource(name=topic), id=queue_id),
        filter_expression=definition.FilterExpression(
            type=definition.FilterType.Value(filter_type), expression=expression
        ),
        batch_size=batch,
        auto_renew=auto_renew,
    )
    if invisible_ms is not None:
        request.invisible_duration.CopyFrom(duration(invisible_ms))
    if polling_ms is not None:
        request.long_polling_timeout.CopyFrom(duration(polling_ms))
    handler: Any = consume_methods(broker)[path("ReceiveMessage")].handler
    out = Received(None, [], [])
    context = call_context(deadline, conn_id=conn_id, client_id=client_id)
    async for response in handler(request, context):
        kind = response.WhichOneof("content")
        out.order.append(kind)
        if kind == "status":
            out.status = response.status
        elif kind == "message":
            out.messages.append(response.message)
    return out


async def receive_until(broker: BrokerContext, timeout_s: float, **options: Any) -> Received:
    with trio.fail_after(timeout_s):
        while True:
            got = await receive(broker, polling_ms=2_000, **options)
            if got.messages:
                return got


async def unary(broker: BrokerContext, rpc: str, **fields: Any) -> Any:
    method = consume_methods(broker)[path(rpc)]
    handler: Any = method.handler
    return await handler(method.request_type(**fields), call_context())


def resource(name: str) -> Any:
    definition, _ = load()
    return definition.Resource(name=name)


async def ack(broker: BrokerContext, *pairs: tuple[str, str], group: str = GROUP) -> Any:
    """AckMessage of (message id, receipt handle) pairs."""
    _, service = load()
    entries = [service.AckMessageEntry(message_id=m, receipt_handle=r) for m, r in pairs]
    return await unary(
        broker, "AckMessage", group=resource(group), topic=resource(TOPIC), entries=entries
    )


async def change(broker: BrokerContext, message: Any, receipt: str, invisible_ms: int) -> Any:
    return await unary(
        broker,
        "ChangeInvisibleDuration",
        group=resource(GROUP),
        topic=resource(TOPIC),
        receipt_handle=receipt,
        invisible_duration=duration(invisible_ms),
        message_id=message.system_properties.message_id,
    )
