"""The RocketMQ 5 service's methods as the gRPC server serves them: routes, sessions and
producers here, consumers from `broker.grpc.consume`.

Built at the first gRPC connection (the server imports this module then), so protobuf and the
generated bindings cost nothing to a broker no 5.x client talks to. Each call passes
`GrpcAccess` first when ACL is on (a consumer's call needs SUB on its topic and its group); a
refusal is the call's response with only its `status` set (UNAUTHORIZED or FORBIDDEN).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from broker.acl.permission import Permission
from broker.grpc.acl import GrpcAccess, group_needs, topic_needs
from broker.grpc.consume import consume_methods
from broker.grpc.methods import CallContext, Kind, Message, Method, MethodTable, path
from broker.grpc.route import RouteService
from broker.grpc.send import SendService
from broker.grpc.sessions import SessionService
from broker.grpc.transaction_ids import EndTransactionService
from protocol.v2 import load

if TYPE_CHECKING:
    from broker.context import BrokerContext

Needs = Callable[[Message], Mapping[str, Permission]]
Unary = Callable[[Message, CallContext], Awaitable[Message]]


def _nothing(_request: Message) -> Mapping[str, Permission]:
    return {}


def _send_needs(request: Message) -> Mapping[str, Permission]:
    topic = request.messages[0].topic.name if request.messages else ""
    return topic_needs(topic, Permission.PUB)


def _guarded(access: GrpcAccess, rpc: str, response: Any, needs: Needs, call: Unary) -> Unary:
    async def guarded(request: Message, context: CallContext) -> Message:
        refused = access.check(context, rpc, needs(request))
        if refused is not None:
            return response(status=refused)
        return await call(request, context)

    return guarded


def producer_methods(broker: BrokerContext, endpoint: tuple[str, int]) -> dict[str, Method]:
    """QueryRoute, the session RPCs, SendMessage and EndTransaction."""
    _, service = load()
    access = GrpcAccess(broker.config)
    route = RouteService(broker, endpoint)
    sessions = SessionService(broker)
    send = SendService(broker)
    end = EndTransactionService(broker)
    unary: list[tuple[str, Any, Any, Needs, Unary]] = [
        ("QueryRoute", service.QueryRouteRequest, service.QueryRouteResponse, _nothing,
         route.query_route),
        ("Heartbeat", service.HeartbeatRequest, service.HeartbeatResponse,
         lambda r: group_needs(r.group.name, Permission.SUB), sessions.heartbeat),
        ("NotifyClientTermination", service.NotifyClientTerminationRequest,
         service.NotifyClientTerminationResponse, _nothing, sessions.notify_client_termination),
        ("SendMessage", service.SendMessageRequest, service.SendMessageResponse, _send_needs,
         send.send_message),
        ("EndTransaction", service.EndTransactionRequest, service.EndTransactionResponse,
         lambda r: topic_needs(r.topic.name, Permission.PUB), end.end_transaction),
    ]  # fmt: skip
    table = {
        path(rpc): Method(Kind.UNARY, request, _guarded(access, rpc, response, needs, call))
        for rpc, request, response, needs, call in unary
    }

    async def telemetry(
        requests: AsyncIterator[Message],
        send_one: Callable[[Message], Awaitable[None]],
        context: CallContext,
    ) -> None:
        refused = access.check(context, "Telemetry", {})
        if refused is not None:
            await send_one(service.TelemetryCommand(status=refused))
            return
        await sessions.telemetry(requests, send_one, context)

    table[path("Telemetry")] = Method(Kind.BIDI, service.TelemetryCommand, telemetry)
    return table


def _consume_needs(request: Message) -> Mapping[str, Permission]:
    """SUB on the topic and on the group, as a 4.x pull of the group needs."""
    fields = request.DESCRIPTOR.fields_by_name
    queue_or_topic = request.message_queue if "message_queue" in fields else request
    topic = queue_or_topic.topic.name
    return {
        **topic_needs(topic, Permission.SUB),
        **group_needs(request.group.name, Permission.SUB),
    }


#: the consumer RPCs (`broker.grpc.consume`) and their responses' classes
_CONSUME_RESPONSES = {
    "AckMessage": "AckMessageResponse",
    "ChangeInvisibleDuration": "ChangeInvisibleDurationResponse",
    "ForwardMessageToDeadLetterQueue": "ForwardMessageToDeadLetterQueueResponse",
    "QueryAssignment": "QueryAssignmentResponse",
    "ReceiveMessage": "ReceiveMessageResponse",
}


def _guard_consumers(access: GrpcAccess, table: dict[str, Method]) -> dict[str, Method]:
    """Each consumer call passes `access` first; a refused ReceiveMessage streams its status."""
    _, service = load()
    guarded: dict[str, Method] = {}
    for rpc, response_name in _CONSUME_RESPONSES.items():
        method = table.pop(path(rpc))
        response = getattr(service, response_name)
        if method.kind is Kind.UNARY:
            call: Any = method.handler
            handler: Any = _guarded(access, rpc, response, _consume_needs, call)
        else:
            handler = _guarded_stream(access, rpc, response, method.handler)
        guarded[path(rpc)] = Method(method.kind, method.request_type, handler)
    if table:
        raise ValueError(f"consumer methods without an ACL rule: {sorted(table)}")
    return guarded


def _guarded_stream(access: GrpcAccess, rpc: str, response: Any, call: Any) -> Any:
    async def guarded(request: Message, context: CallContext) -> AsyncIterator[Message]:
        refused = access.check(context, rpc, _consume_needs(request))
        if refused is not None:
            yield response(status=refused)
            return
        async for answer in call(request, context):
            yield answer

    return guarded


def methods(broker: BrokerContext, endpoint: tuple[str, int]) -> MethodTable:
    """`:path` -> method for `broker`, whose gRPC clients reach it at `endpoint`."""
    table = producer_methods(broker, endpoint)
    table.update(_guard_consumers(GrpcAccess(broker.config), consume_methods(broker)))
    return table
