"""The gRPC server driven by grpcio's generic client: the four shapes of call, statuses,
deadlines, cancellation, large messages through flow control, and unknown methods."""

from __future__ import annotations

import threading
import time
from typing import Any

import grpc
import trio

from tests.grpc.server_harness import SERVICE, resource_type, start_server, unary


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


def _call(target: str, name: str, request: Any, timeout: float = 30, **kw: Any) -> Any:
    """A unary call; returns the response or the grpc.RpcError."""
    with _channel(target) as channel:
        try:
            return unary(channel, name)(request, timeout=timeout, **kw)
        except grpc.RpcError as exc:
            return exc


async def test_server_stream_and_bidi(nursery: trio.Nursery) -> None:
    running = await start_server(nursery)
    resource = resource_type()

    def calls() -> tuple[list[str], list[str]]:
        with _channel(running.target) as channel:
            stream = channel.unary_stream(
                SERVICE + "Stream",
                request_serializer=resource.SerializeToString,
                response_deserializer=resource.FromString,
            )
            streamed = [m.name for m in stream(resource(name="50"), timeout=30)]
            bidi = channel.stream_stream(
                SERVICE + "Bidi",
                request_serializer=resource.SerializeToString,
                response_deserializer=resource.FromString,
            )
            requests = (resource(name=f"b{i}") for i in range(20))
            echoed = [m.name for m in bidi(requests, timeout=30)]
            return streamed, echoed

    streamed, echoed = await trio.to_thread.run_sync(calls)
    assert streamed == [f"m{i}" for i in range(50)]
    assert echoed == [f"b{i}" for i in range(20)]
    await running.stop()


async def test_errors_reach_the_client_as_statuses(nursery: trio.Nursery) -> None:
    running = await start_server(nursery)
    resource = resource_type()
    target = running.target
    failed = await trio.to_thread.run_sync(_call, target, "Fail", resource(name="thé 100%"))
    assert failed.code() == grpc.StatusCode.NOT_FOUND
    assert failed.details() == "no thé 100%"
    crashed = await trio.to_thread.run_sync(_call, target, "Crash", resource(name="x"))
    assert crashed.code() == grpc.StatusCode.INTERNAL
    missing = await trio.to_thread.run_sync(_call, target, "Nothing", resource(name="x"))
    assert missing.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "/test.Echo/Nothing" in missing.details()
    # the connection and the server survived all three
    answer = await trio.to_thread.run_sync(_call, target, "Unary", resource(name="still"))
    assert answer.name == "still"
    await running.stop()


async def test_deadline_cancels_the_handler(nursery: trio.Nursery) -> None:
    running = await start_server(nursery)
    resource = resource_type()
    late = await trio.to_thread.run_sync(
        lambda: _call(running.target, "Slow", resource(name="x"), timeout=0.5)
    )
    assert late.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    with trio.fail_after(10):
        await running.probe.cancelled.wait()
    await running.stop()


async def test_client_cancellation_cancels_the_handler(nursery: trio.Nursery) -> None:
    running = await start_server(nursery)
    resource = resource_type()

    def cancel_after_start(started: Any) -> Any:
        with _channel(running.target) as channel:
            future = unary(channel, "Slow").future(resource(name="x"), timeout=60)
            trio.from_thread.run(started.wait)
            future.cancel()
            return future

    future = await trio.to_thread.run_sync(cancel_after_start, running.probe.slow_started)
    assert future.cancelled()
    with trio.fail_after(10):
        await running.probe.cancelled.wait()
    await running.stop()


async def test_four_mebibytes_both_ways_through_flow_control(nursery: trio.Nursery) -> None:
    running = await start_server(nursery)
    resource = resource_type()
    big = "x" * (4 << 20)

    def calls() -> tuple[Any, Any]:
        options = [
            ("grpc.max_receive_message_length", 64 << 20),
            ("grpc.max_send_message_length", 64 << 20),
        ]
        with grpc.insecure_channel(running.target, options=options) as channel:
            echo = unary(channel, "Unary")(resource(name=big), timeout=60)
            too_big = resource(name="y" * (6 << 20))
            try:
                refused = unary(channel, "Unary")(too_big, timeout=60)
            except grpc.RpcError as exc:
                refused = exc
            return echo, refused

    echo, refused = await trio.to_thread.run_sync(calls)
    assert echo.name == big
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    await running.stop()


async def test_shutdown_lets_a_call_in_flight_finish(nursery: trio.Nursery) -> None:
    running = await start_server(nursery)
    resource = resource_type()
    results: list[Any] = []
    token = trio.lowlevel.current_trio_token()
    first_answered = threading.Event()

    def slow_stream() -> None:
        with _channel(running.target) as channel:
            bidi = channel.stream_stream(
                SERVICE + "Bidi",
                request_serializer=resource.SerializeToString,
                response_deserializer=resource.FromString,
            )

            def requests() -> Any:
                yield resource(name="first")
                assert first_answered.wait(30)
                trio.from_thread.run_sync(running.server.shutdown, 10.0, trio_token=token)
                yield resource(name="after goaway")

            for answer in bidi(requests(), timeout=30):
                results.append(answer.name)
                first_answered.set()

    await trio.to_thread.run_sync(slow_stream)
    assert results == ["first", "after goaway"]
    with trio.fail_after(15):
        await running.done.wait()
    # no new connection after the shutdown
    late = await trio.to_thread.run_sync(
        lambda: _call(running.target, "Unary", resource(name="x"), timeout=5)
    )
    assert late.code() == grpc.StatusCode.UNAVAILABLE


async def test_keepalive_pings_are_tolerated(nursery: trio.Nursery) -> None:
    running = await start_server(nursery)
    resource = resource_type()
    options = [
        ("grpc.keepalive_time_ms", 100),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]

    def calls() -> list[str]:
        names = []
        with grpc.insecure_channel(running.target, options=options) as channel:
            echo = unary(channel, "Unary")
            for i in range(3):
                names.append(echo(resource(name=f"k{i}"), timeout=30).name)
                time.sleep(0.5)  # idle between calls: the client pings
        return names

    assert await trio.to_thread.run_sync(calls) == ["k0", "k1", "k2"]
    # one connection served the three calls: the pings did not end it
    assert len({context.conn_id for context in running.probe.contexts}) == 1
    await running.stop()
