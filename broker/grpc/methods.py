"""The shape of a gRPC method as the server calls it, and the errors a handler may raise.

A handler sees decoded protobuf messages and a `CallContext`; it never sees HTTP/2. Three kinds,
as the RocketMQ 5 service uses them:

- `UNARY`: `await handler(request, context)` returns the response message.
- `SERVER_STREAM`: `handler(request, context)` is an async iterator of response messages
  (ReceiveMessage).
- `BIDI`: `await handler(requests, send, context)`; `requests` is an async iterator of the
  client's messages, ending when the client half-closes; `send(message)` writes one response and
  waits for flow control (Telemetry).

A handler ends a call with a gRPC status other than OK by raising `GrpcError`. RocketMQ 5 answers
most refusals inside the response (`Status` with a `Code`), with gRPC status OK; `GrpcError` is
for what the service cannot answer that way (an unknown method, a malformed request).
Cancellation (the client's RST_STREAM, the deadline) arrives as Trio cancellation.
"""

from __future__ import annotations

import enum
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeAlias

if TYPE_CHECKING:
    from broker.config import BrokerConfig

#: protobuf message classes are built at import time from the generated bindings, so they are
#: typed loosely here
Message: TypeAlias = Any

SERVICE: Final = "apache.rocketmq.v2.MessagingService"


def path(rpc: str) -> str:
    """The HTTP/2 `:path` of one of the service's RPCs: `/apache.rocketmq.v2.MessagingService/X`."""
    return f"/{SERVICE}/{rpc}"


class StatusCode(enum.IntEnum):
    """gRPC's status codes (grpc/doc/statuscodes.md), sent in the `grpc-status` trailer."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class GrpcError(Exception):
    """End the call with `status` and `message` (the `grpc-message` trailer)."""

    def __init__(self, status: StatusCode, message: str) -> None:
        super().__init__(f"{status.name}: {message}")
        self.status = status
        self.message = message


class Kind(enum.Enum):
    UNARY = "unary"
    SERVER_STREAM = "server_stream"
    BIDI = "bidi"


@dataclass(frozen=True, slots=True)
class CallContext:
    """What a handler knows of its call besides the request."""

    #: the connection's id, unique in this process (a client's calls share it)
    conn_id: int
    #: "host:port" of the peer
    peer: str
    #: request headers other than the pseudo-headers and HTTP/2's own, names in lower case;
    #: `-bin` headers already base64-decoded (as latin-1 text)
    metadata: Mapping[str, str] = field(default_factory=dict)
    #: trio.current_time() at which the client's grpc-timeout runs out, or inf
    deadline: float = math.inf
    #: whether the connection is TLS
    tls: bool = False


UnaryHandler: TypeAlias = Callable[[Message, CallContext], Awaitable[Message]]
ServerStreamHandler: TypeAlias = Callable[[Message, CallContext], AsyncIterator[Message]]
BidiHandler: TypeAlias = Callable[
    [AsyncIterator[Message], Callable[[Message], Awaitable[None]], CallContext], Awaitable[None]
]


@dataclass(frozen=True, slots=True)
class Method:
    """One RPC: its kind, the class its requests decode to, and its handler."""

    kind: Kind
    #: a generated protobuf message class (`FromString` decodes a request)
    request_type: Any
    handler: UnaryHandler | ServerStreamHandler | BidiHandler


#: what the server serves: `:path` -> method
MethodTable: TypeAlias = Mapping[str, Method]

#: room above the broker's max_message_size for the rest of a request (topic, properties, ids)
MESSAGE_HEADROOM: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class GrpcSettings:
    """The limits of one gRPC endpoint."""

    max_concurrent_streams: int = 100
    #: the largest request message (compressed flag and length not counted)
    max_message_size: int = 4 * 1024 * 1024 + MESSAGE_HEADROOM
    max_header_list_size: int = 16 * 1024
    #: flow-control windows granted to the peer: per stream and for the whole connection
    stream_window: int = 1 << 20
    connection_window: int = 4 << 20
    #: a connection without a call in flight that receives nothing for this long is closed
    idle_timeout_s: float = 120.0
    #: a peer that does not read what it is sent for this long loses its connection
    write_timeout_s: float = 30.0

    @classmethod
    def from_config(cls, config: BrokerConfig) -> GrpcSettings:
        return cls(
            max_concurrent_streams=config.grpc_max_concurrent_streams,
            max_message_size=config.store.max_message_size + MESSAGE_HEADROOM,
            max_header_list_size=config.grpc_max_header_list_size,
            idle_timeout_s=config.idle_timeout_s,
            write_timeout_s=config.write_timeout_s,
        )
