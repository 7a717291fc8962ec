"""A gRPC server in the test's process on 127.0.0.1 port 0, serving test methods, and grpcio
clients run in threads against it (grpcio blocks).

The test methods use `Resource` (a message with a `name`) as request and response:
Unary echoes, Stream answers `int(name)` messages, Bidi echoes each message, Fail raises
`GrpcError(NOT_FOUND)`, Crash raises RuntimeError, Slow waits until cancelled and records it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import trio

from broker.config import BrokerConfig
from broker.grpc.methods import (
    CallContext,
    GrpcError,
    GrpcSettings,
    Kind,
    Method,
    MethodTable,
    StatusCode,
)
from broker.grpc.server import GrpcServer
from broker.read_budget import ReadBudget
from protocol.v2 import load

SERVICE: Final = "/test.Echo/"


def resource_type() -> Any:
    definition, _ = load()
    return definition.Resource


@dataclass
class Probe:
    """What the test methods saw."""

    contexts: list[CallContext] = field(default_factory=list)
    cancelled: trio.Event = field(default_factory=trio.Event)
    slow_started: trio.Event = field(default_factory=trio.Event)


def echo_methods(probe: Probe) -> MethodTable:
    resource = resource_type()

    async def unary(request: Any, context: CallContext) -> Any:
        probe.contexts.append(context)
        return request

    async def stream(request: Any, context: CallContext) -> AsyncIterator[Any]:
        for i in range(int(request.name)):
            yield resource(name=f"m{i}")

    async def bidi(
        requests: AsyncIterator[Any], send: Callable[[Any], Awaitable[None]], context: CallContext
    ) -> None:
        async for request in requests:
            await send(request)

    async def fail(request: Any, context: CallContext) -> Any:
        raise GrpcError(StatusCode.NOT_FOUND, f"no {request.name}")

    async def crash(request: Any, context: CallContext) -> Any:
        raise RuntimeError("handler bug")

    async def slow(request: Any, context: CallContext) -> Any:
        probe.slow_started.set()
        try:
            await trio.sleep_forever()
        finally:
            probe.cancelled.set()

    return {
        SERVICE + "Unary": Method(Kind.UNARY, resource, unary),
        SERVICE + "Stream": Method(Kind.SERVER_STREAM, resource, stream),
        SERVICE + "Bidi": Method(Kind.BIDI, resource, bidi),
        SERVICE + "Fail": Method(Kind.UNARY, resource, fail),
        SERVICE + "Crash": Method(Kind.UNARY, resource, crash),
        SERVICE + "Slow": Method(Kind.UNARY, resource, slow),
    }


@dataclass
class RunningServer:
    server: GrpcServer
    probe: Probe
    done: trio.Event

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def stop(self, grace_s: float = 5.0) -> None:
        self.server.shutdown(grace_s)
        with trio.fail_after(grace_s + 10):
            await self.done.wait()


async def start_server(
    nursery: trio.Nursery,
    config: BrokerConfig | None = None,
    settings: GrpcSettings | None = None,
    budget: ReadBudget | None = None,
) -> RunningServer:
    probe = Probe()
    methods = lambda: echo_methods(probe)  # noqa: E731
    server = GrpcServer(config or BrokerConfig(), methods, settings=settings, budget=budget)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    done = trio.Event()

    async def run(*, task_status: trio.TaskStatus[None]) -> None:
        try:
            await server.run(listeners, task_status=task_status)
        finally:
            done.set()

    await nursery.start(run)
    return RunningServer(server, probe, done)


def unary(channel: Any, name: str) -> Any:
    """A unary-unary callable for `SERVICE + name` on a grpcio channel."""
    resource = resource_type()
    return channel.unary_unary(
        SERVICE + name,
        request_serializer=resource.SerializeToString,
        response_deserializer=resource.FromString,
    )
