"""The gRPC server driven by grpcio's generic client: the four shapes of call, statuses,
deadlines, cancellation, large messages through flow control, and unknown methods."""

from __future__ import annotations

from typing import Any

import grpc
import trio

from tests.grpc.server_harness import resource_type, start_server, unary


def _channel(target: str) -> grpc.Channel:
    return grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", 64 << 20)])


async def test_unary_echo_and_metadata(nursery: trio.Nursery) -> None:
    running = await start_server(nursery)
    resource = resource_type()

    def call() -> Any:
        with _channel(running.target) as channel:
            return unary(channel, "Unary").with_call(
                resource(name="hello"),
                metadata=[("x-mq-client-id", "c1"), ("x-trace-bin", b"\x00\xffab")],
                timeout=30,
            )

    answer, rpc = await trio.to_thread.run_sync(call)
    assert answer.name == "hello"
    assert rpc.code() == grpc.StatusCode.OK
    (context,) = running.probe.contexts
    assert context.metadata["x-mq-client-id"] == "c1"
    assert context.metadata["x-trace-bin"] == "\x00\xffab"
    assert context.peer.startswith("127.0.0.1:")
    assert not context.tls
    assert context.deadline < trio.current_time() + 31
    await running.stop()
