"""The RocketMQ 5 service's methods as the gRPC server serves them: routes, sessions and
producers here, consumers from `broker.grpc.consume`.

Built at the first gRPC connection (the server imports this module then), so protobuf and the
generated bindings cost nothing to a broker no 5.x client talks to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.grpc.consume import consume_methods
from broker.grpc.methods import Kind, Method, MethodTable, path
from broker.grpc.route import RouteService
from broker.grpc.send import SendService
from broker.grpc.sessions import SessionService
from broker.grpc.transaction_ids import EndTransactionService
from protocol.v2 import load

if TYPE_CHECKING:
    from broker.context import BrokerContext


def producer_methods(broker: BrokerContext, endpoint: tuple[str, int]) -> dict[str, Method]:
    """QueryRoute, the session RPCs, SendMessage and EndTransaction."""
    _, service = load()
    route = RouteService(broker, endpoint)
    sessions = SessionService(broker)
    send = SendService(broker)
    end = EndTransactionService(broker)
    return {
        path("QueryRoute"): Method(Kind.UNARY, service.QueryRouteRequest, route.query_route),
        path("Heartbeat"): Method(Kind.UNARY, service.HeartbeatRequest, sessions.heartbeat),
        path("NotifyClientTermination"): Method(
            Kind.UNARY, service.NotifyClientTerminationRequest, sessions.notify_client_termination
        ),
        path("Telemetry"): Method(Kind.BIDI, service.TelemetryCommand, sessions.telemetry),
        path("SendMessage"): Method(Kind.UNARY, service.SendMessageRequest, send.send_message),
        path("EndTransaction"): Method(
            Kind.UNARY, service.EndTransactionRequest, end.end_transaction
        ),
    }


def methods(broker: BrokerContext, endpoint: tuple[str, int]) -> MethodTable:
    """`:path` -> method for `broker`, whose gRPC clients reach it at `endpoint`."""
    table = producer_methods(broker, endpoint)
    table.update(consume_methods(broker))
    return table
