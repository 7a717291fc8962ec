"""The gRPC server against a raw HTTP/2 client: requests that are not gRPC, the grpc-timeout
and grpc-encoding headers, compressed messages, and peers that break HTTP/2 (garbage, huge
headers, too many streams, a storm of RST_STREAMs). A broken peer loses its connection with one
log event; the server and its other connections go on."""

from __future__ import annotations

import gzip
from collections.abc import MutableMapping
from typing import Any

import h2.errors
import h2.exceptions
import trio
from hyperframe.frame import DataFrame, GoAwayFrame
from structlog.testing import capture_logs

from broker.grpc.methods import GrpcSettings
from broker.read_budget import ReadBudget
from tests.grpc.raw_h2 import RawClient, frame, grpc_headers
from tests.grpc.server_harness import SERVICE, RunningServer, resource_type, start_server


def _hello() -> bytes:
    payload: bytes = resource_type()(name="hello").SerializeToString()
    return payload


async def _still_serves(running: RunningServer) -> None:
    client = await RawClient.open(running.port)
    answer = await client.answer(await client.request(grpc_headers(), frame(_hello())))
    assert answer.status == "0"
    assert answer.data == frame(_hello())
    await client.aclose()


def _closed(logs: list[MutableMapping[str, Any]]) -> list[str]:
    return [e["reason"] for e in logs if e["event"] == "grpc_connection_closed"]


async def _closed_soon(logs: list[MutableMapping[str, Any]], count: int = 1) -> list[str]:
    """The reasons of the first `count` closed connections, once logged (a broken peer's
    connection is logged after the server has read what the peer still sent)."""
    with trio.fail_after(10):
        while len(_closed(logs)) < count:  # noqa: ASYNC110 - log capture has no event
            await trio.sleep(0.01)
    return _closed(logs)


async def test_requests_that_are_not_grpc_get_statuses(nursery: trio.Nursery) -> None:
    running = await start_server(nursery)
    client = await RawClient.open(running.port)
    cases = {
        "get": (grpc_headers(p_method="GET"), "405", "13"),
        "content_type": (grpc_headers(content_type="application/json"), "415", "13"),
        "te": (grpc_headers(te=""), "200", "13"),
        "unknown": (grpc_headers(path="/x.Y/Z"), "200", "12"),
        "timeout": (grpc_headers(grpc_timeout="soon"), "200", "13"),
        "encoding": (grpc_headers(grpc_encoding="snappy"), "200", "12"),
    }
    for name, (headers, http_status, grpc_status) in cases.items():
        answer = await client.answer(await client.request(headers, frame(_hello())))
        assert answer.headers[":status"] == http_status, name
        assert answer.status == grpc_status, name
        assert answer.data == b"", name
    assert "gzip" in answer.headers["grpc-accept-encoding"]
    # all on one connection, still open
    ok = await client.answer(await client.request(grpc_headers(), frame(_hello())))
    assert ok.status == "0"
    await client.aclose()
    await running.stop()


async def test_grpc_timeout_ends_the_call_with_deadline_exceeded(nursery: trio.Nursery) -> None:
    running = await start_server(nursery)
    client = await RawClient.open(running.port)
    headers = grpc_headers(path=SERVICE + "Slow", grpc_timeout="300m")
    answer = await client.answer(await client.request(headers, frame(_hello())))
    assert answer.status == "4"  # the server's own deadline: this client never resets
    assert running.probe.cancelled.is_set()
    await client.aclose()
    await running.stop()


async def test_compressed_messages(nursery: trio.Nursery) -> None:
    running = await start_server(nursery)
    client = await RawClient.open(running.port)
    packed = frame(gzip.compress(_hello()), compressed=True)
    unnegotiated = await client.answer(await client.request(grpc_headers(), packed))
    assert unnegotiated.status == "13"
    gzipped = await client.answer(await client.request(grpc_headers(grpc_encoding="gzip"), packed))
    assert gzipped.status == "0"
    assert gzipped.data == frame(_hello())  # answered uncompressed
    bomb = frame(gzip.compress(b"\0" * (8 << 20)), compressed=True)
    burst = await client.answer(await client.request(grpc_headers(grpc_encoding="gzip"), bomb))
    assert burst.status == "8"
    await client.aclose()
    await running.stop()


async def test_a_message_cut_short_by_end_of_stream(nursery: trio.Nursery) -> None:
    running = await start_server(nursery)
    client = await RawClient.open(running.port)
    answer = await client.answer(await client.request(grpc_headers(), frame(_hello())[:-2]))
    assert answer.status == "13"
    two = await client.answer(await client.request(grpc_headers(), frame(_hello()) * 2))
    assert two.status == "13"
    none = await client.answer(await client.request(grpc_headers()))
    assert none.status == "13"
    await client.aclose()
    await running.stop()


async def test_garbage_and_a_bad_preface_end_only_that_connection(
    nursery: trio.Nursery,
) -> None:
    running = await start_server(nursery)
    with capture_logs() as logs:
        for payload in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\x16\x03\x01" + b"\xff" * 300):
            stream = await trio.open_tcp_stream("127.0.0.1", running.port)
            await stream.send_all(payload)
            with trio.fail_after(10):
                while await stream.receive_some(65536):
                    pass
            await stream.aclose()
        assert (await _closed_soon(logs, 2))[:2] == ["protocol_error", "protocol_error"]
        await _still_serves(running)
    await running.stop()


async def test_huge_headers_end_the_connection(nursery: trio.Nursery) -> None:
    running = await start_server(nursery, settings=GrpcSettings(max_header_list_size=4096))
    client = await RawClient.open(running.port)
    with capture_logs() as logs:
        big = [(f"x-pad-{i}", "v" * 1000) for i in range(10)]
        await client.request(grpc_headers(extra=big), frame(_hello()))
        await client.until_closed()
        assert (await _closed_soon(logs))[0] == "protocol_error"
        await _still_serves(running)
    assert client.goaway is not None
    assert client.goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    await running.stop()


async def test_more_streams_than_allowed_end_the_connection(nursery: trio.Nursery) -> None:
    running = await start_server(nursery, settings=GrpcSettings(max_concurrent_streams=4))
    client = await RawClient.open(running.port)
    # the client's h2 keeps to the server's limit once it has read the SETTINGS: open the
    # streams before reading anything
    with capture_logs() as logs:
        for _ in range(6):
            await client.request(grpc_headers(path=SERVICE + "Slow"), frame(_hello()))
        await client.until_closed()
        assert (await _closed_soon(logs))[0] == "protocol_error"
        await _still_serves(running)
    assert client.goaway is not None
    assert client.goaway.error_code == h2.errors.ErrorCodes.PROTOCOL_ERROR
    await running.stop()


async def test_a_storm_of_resets_ends_the_connection(nursery: trio.Nursery) -> None:
    running = await start_server(nursery)
    client = await RawClient.open(running.port)
    with capture_logs() as logs:
        for _ in range(1100):
            try:
                stream_id = await client.request(grpc_headers(path=SERVICE + "Slow"), end=False)
                client.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
            except h2.exceptions.ProtocolError:
                break
            await client.flush()
            if client.closed:
                break
        await client.until_closed()
        assert (await _closed_soon(logs))[0] == "reset_flood"
        await _still_serves(running)
    assert client.goaway is not None
    assert client.goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    await running.stop()


async def test_pings_are_answered(nursery: trio.Nursery) -> None:
    running = await start_server(nursery)
    client = await RawClient.open(running.port)
    for i in range(5):
        client.h2.ping(bytes([i]) * 8)
        await client.flush()
    stream_id = await client.request(grpc_headers(), frame(_hello()))
    answer = await client.answer(stream_id)
    assert answer.status == "0"
    assert not client.closed
    await client.aclose()
    await running.stop()


async def test_partial_messages_past_the_read_budget_end_the_connection(
    nursery: trio.Nursery,
) -> None:
    budget = ReadBudget(1 << 20)
    running = await start_server(nursery, budget=budget)
    client = await RawClient.open(running.port)
    await client.settle()
    with capture_logs() as logs:
        # two streams announce 3 MiB messages and send 700 KiB of each: 1.4 MiB held
        for _ in range(2):
            partial = frame(b"p" * (3 << 20))[: 700 << 10]
            await client.request(grpc_headers(), partial, end=False)
        await client.until_closed()
        assert (await _closed_soon(logs))[0] == "read_budget"
        await _still_serves(running)
        await _closed_soon(logs, 2)  # that connection's bytes released too
    assert budget.total == 0
    assert budget.stopped == 1
    await running.stop()


def _goaway(error_code: int = 0, last_stream_id: int = 0) -> bytes:
    """A client's GOAWAY as raw bytes: the test's own h2 would refuse to send anything after."""
    goaway = GoAwayFrame(0)
    goaway.last_stream_id = last_stream_id
    goaway.error_code = error_code
    return bytes(goaway.serialize())


async def test_calls_in_flight_finish_after_the_client_goaway(nursery: trio.Nursery) -> None:
    # grpc-js closing its channel: GOAWAY(NO_ERROR), then the half-close of an open bidi call
    # (h2 alone closed the connection on that DATA: "RECV_DATA in state CLOSED")
    running = await start_server(nursery)
    client = await RawClient.open(running.port)
    with capture_logs() as logs:
        bidi = await client.request(grpc_headers(path=SERVICE + "Bidi"), frame(_hello()), end=False)
        with trio.fail_after(10):
            while frame(_hello()) not in client.answers[bidi].data:
                await client.receive()
        await client.stream.send_all(_goaway())
        client.h2.send_data(bidi, frame(_hello()), end_stream=True)
        await client.flush()
        answer = await client.answer(bidi)
        assert answer.status == "0"
        assert answer.data == frame(_hello()) * 2
        assert client.goaway is None and not client.closed
        await client.aclose()
        assert (await _closed_soon(logs))[0] == "peer_goaway"
    assert not [e for e in logs if e["event"] in {"grpc_connection_failed", "grpc_handler_failed"}]
    await running.stop()


async def test_a_client_goaway_with_an_error_ends_its_calls(nursery: trio.Nursery) -> None:
    running = await start_server(nursery)
    client = await RawClient.open(running.port)
    with capture_logs() as logs:
        await client.request(grpc_headers(path=SERVICE + "Slow"), frame(_hello()))
        with trio.fail_after(10):
            await running.probe.slow_started.wait()
        await client.stream.send_all(_goaway(h2.errors.ErrorCodes.PROTOCOL_ERROR, 0))
        await client.until_closed()
        assert (await _closed_soon(logs))[0] == "peer_goaway_error"
        await _still_serves(running)
    assert running.probe.cancelled.is_set()
    await running.stop()


async def test_data_after_the_call_ended_is_dropped_and_the_connection_goes_on(
    nursery: trio.Nursery,
) -> None:
    # the server answered and reset a stream whose request the client was still sending: the
    # client's DATA in flight is dropped, its flow-control credit given back, nothing closed
    running = await start_server(nursery)
    client = await RawClient.open(running.port)
    await client.settle()
    with capture_logs() as logs:
        stream_id = await client.request(grpc_headers(path="/x.Y/Z"), frame(_hello()), end=False)
        answer = await client.answer(stream_id)
        assert answer.status == "12"
        window = client.h2.outbound_flow_control_window
        for _ in range(3):  # past the reset, the raw bytes h2 would not send on a closed stream
            data = DataFrame(stream_id)
            data.data = b"x" * 16_000
            await client.stream.send_all(data.serialize())
        with trio.fail_after(10):
            while client.h2.outbound_flow_control_window < window:
                await client.receive()
        ok = await client.answer(await client.request(grpc_headers(), frame(_hello())))
        assert ok.status == "0"
        assert not client.closed
    assert _closed(logs) == []
    await client.aclose()
    await running.stop()


async def test_idle_connections_close_but_long_calls_are_not_idle(nursery: trio.Nursery) -> None:
    running = await start_server(nursery, settings=GrpcSettings(idle_timeout_s=0.3))
    client = await RawClient.open(running.port)
    with capture_logs() as logs:
        # a call running longer than the idle timeout keeps the connection
        headers = grpc_headers(path=SERVICE + "Slow", grpc_timeout="1200m")
        answer = await client.answer(await client.request(headers, frame(_hello())))
        assert answer.status == "4"
        assert not client.closed
        # then nothing: the server says goodbye
        await client.until_closed()
        assert (await _closed_soon(logs))[0] == "idle"
    assert client.goaway is not None
    assert client.goaway.error_code == h2.errors.ErrorCodes.NO_ERROR
    await running.stop()
