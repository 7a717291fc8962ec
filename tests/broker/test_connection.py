"""The connection task over `memory_stream_pair`: concurrency, ordering, limits, errors.

Processors here are small stand-ins (sleeping, blocking, failing) so each test controls timing;
what is under test is `broker.connection`: dispatch by code, answers by opaque, oneway silence,
the in-flight limit, protocol errors and the idle timeout.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
import trio
import trio.testing
from structlog.testing import capture_logs

from broker.config import BrokerConfig
from broker.connection import Connection
from broker.context import BrokerContext
from broker.dispatcher import Dispatcher
from broker.processors import RequestContext, RequestProcessor
from protocol.codes import ResponseCode, SerializeType
from protocol.command import RemotingCommand
from protocol.errors import HeaderFieldError
from protocol.frame import FrameDecoder, encode_frame

SLEEP, FAIL, BAD_FIELD, BLOCK, ECHO = 1001, 1002, 1003, 1004, 1005


class Sleeper:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        await trio.sleep(float(request.ext_fields["seconds"]))
        return request.make_response(ResponseCode.SUCCESS, request.ext_fields["seconds"])


class Failing:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        raise RuntimeError("disk on fire")


class BadField:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        raise HeaderFieldError("queueId", "the custom field queueId is null")


class Blocking:
    def __init__(self) -> None:
        self.entered = 0
        self.release = trio.Event()

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        self.entered += 1
        await self.release.wait()
        return request.make_response(ResponseCode.SUCCESS)


class Echo:
    def __init__(self) -> None:
        self.seen: list[int] = []

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        self.seen.append(request.opaque)
        return request.make_response(ResponseCode.SUCCESS, ctx.remote_text)


class Peer:
    """The client end of a memory stream pair: send requests, read decoded responses."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        self.pending: list[RemotingCommand] = []

    async def send(self, command: RemotingCommand) -> None:
        await self.stream.send_all(encode_frame(command))

    async def receive(self) -> RemotingCommand:
        while not self.pending:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError("connection closed")
            self.pending.extend(self.decoder.feed(bytes(data)))
        return self.pending.pop(0)

    async def closed(self) -> bool:
        return await self.stream.receive_some(65536) == b""


def context(config: BrokerConfig) -> BrokerContext:
    # The stand-in processors never touch the store or the tables.
    return BrokerContext(config, cast(Any, None), cast(Any, None), cast(Any, None), ("1.2.3.4", 1))


def request(code: int, opaque: int, **fields: str) -> RemotingCommand:
    return RemotingCommand.request(code, dict(fields), opaque=opaque)


@pytest.fixture
def blocking() -> Blocking:
    return Blocking()


@pytest.fixture
def echo() -> Echo:
    return Echo()


@pytest.fixture
def config() -> BrokerConfig:
    return dataclasses.replace(BrokerConfig(), max_inflight_per_connection=4, idle_timeout_s=30.0)


@pytest.fixture
async def peer(
    nursery: trio.Nursery, config: BrokerConfig, blocking: Blocking, echo: Echo
) -> AsyncIterator[Peer]:
    client, server = trio.testing.memory_stream_pair()
    processors: dict[int, RequestProcessor] = {
        SLEEP: Sleeper(),
        FAIL: Failing(),
        BAD_FIELD: BadField(),
        BLOCK: blocking,
        ECHO: echo,
    }
    connection = Connection(server, ("10.0.0.9", 4242), context(config), Dispatcher(processors))

    async def run() -> None:
        await connection.run()
        await server.aclose()

    nursery.start_soon(run)
    yield Peer(client)


async def test_answers_leave_in_completion_order_matched_by_opaque(
    peer: Peer, autojump_clock: trio.testing.MockClock
) -> None:
    await peer.send(request(SLEEP, 7, seconds="2"))
    await peer.send(request(SLEEP, 8, seconds="1"))
    await peer.send(request(SLEEP, 9, seconds="0"))
    answers = [await peer.receive() for _ in range(3)]
    assert [a.opaque for a in answers] == [9, 8, 7]
    assert [a.remark for a in answers] == ["0", "1", "2"]
    assert all(a.is_response and a.code == 0 for a in answers)


async def test_oneway_requests_get_no_answer(peer: Peer, echo: Echo) -> None:
    oneway = RemotingCommand.request(ECHO, opaque=1, oneway=True)
    await peer.send(oneway)
    await peer.send(request(ECHO, 2))
    answer = await peer.receive()
    assert answer.opaque == 2
    assert answer.remark == "10.0.0.9:4242"
    assert echo.seen == [1, 2]  # the oneway request was processed, just not answered


async def test_unknown_code_is_not_supported_in_the_request_serialize_type(peer: Peer) -> None:
    command = RemotingCommand.request(
        9999, {"x": "1"}, opaque=5, serialize_type=SerializeType.ROCKETMQ
    )
    await peer.send(command)
    answer = await peer.receive()
    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert answer.remark == " request type 9999 not supported"
    assert answer.serialize_type is SerializeType.ROCKETMQ
    assert answer.opaque == 5


async def test_processor_failures_become_answers_and_the_connection_lives(peer: Peer) -> None:
    with capture_logs() as logs:
        await peer.send(request(FAIL, 1))
        failed = await peer.receive()
    assert (failed.code, failed.remark) == (ResponseCode.SYSTEM_ERROR, "disk on fire")
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["processor_failed"]
    await peer.send(request(BAD_FIELD, 2))
    bad = await peer.receive()
    assert (bad.code, bad.remark) == (ResponseCode.SYSTEM_ERROR, "the custom field queueId is null")
    await peer.send(request(ECHO, 3))
    assert (await peer.receive()).code == ResponseCode.SUCCESS


async def test_a_request_with_a_wrong_header_field_is_answered_not_run(
    peer: Peer, echo: Echo
) -> None:
    header = b'{"code":1005,"opaque":11,"language":1e30,"extFields":{}}'
    with capture_logs() as logs:
        await peer.stream.send_all(struct.pack(">ii", 4 + len(header), len(header)) + header)
        bad = await peer.receive()
    assert (bad.opaque, bad.code) == (11, ResponseCode.SYSTEM_ERROR)
    assert bad.remark == "JSON header language 1e+30 is neither a language name nor a code 0-255"
    assert echo.seen == []
    assert [e["event"] for e in logs] == ["request_refused"]
    await peer.send(request(ECHO, 12))  # the connection is kept
    assert (await peer.receive()).opaque == 12


async def test_reading_stops_at_the_inflight_limit(peer: Peer, blocking: Blocking) -> None:
    for opaque in range(10):
        await peer.send(request(BLOCK, opaque))
    await trio.testing.wait_all_tasks_blocked()
    assert blocking.entered == 4  # max_inflight_per_connection
    blocking.release.set()
    answers = {(await peer.receive()).opaque for _ in range(10)}
    assert answers == set(range(10))
    assert blocking.entered == 10


async def test_garbage_closes_only_after_running_requests_answered(peer: Peer) -> None:
    with capture_logs() as logs:
        await peer.send(request(SLEEP, 1, seconds="0.05"))
        await peer.stream.send_all(b"\x7f\xff\xff\xff garbage")
        answer = await peer.receive()
        assert answer.opaque == 1
        with trio.fail_after(5):
            assert await peer.closed()
    errors = [e for e in logs if e["event"] == "protocol_error"]
    assert len(errors) == 1
    assert "exceeds the maximum" in errors[0]["error"]


async def test_requests_before_garbage_in_the_same_write_are_answered(
    peer: Peer, echo: Echo
) -> None:
    frames = b"".join(encode_frame(request(ECHO, n)) for n in (1, 2, 3))
    with capture_logs() as logs:
        await peer.stream.send_all(frames + b"\xff\xff\xff\xff")
        answers = [await peer.receive() for _ in range(3)]
        with trio.fail_after(5):
            assert await peer.closed()
    assert sorted(a.opaque for a in answers) == [1, 2, 3]
    assert all(a.code == ResponseCode.SUCCESS for a in answers)
    assert sorted(echo.seen) == [1, 2, 3]
    assert [e["requests"] for e in logs if e["event"] == "protocol_error"] == [3]


async def test_idle_connections_close_after_the_timeout(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    client, server = trio.testing.memory_stream_pair()
    config = dataclasses.replace(BrokerConfig(), idle_timeout_s=120.0)
    connection = Connection(server, ("10.0.0.9", 1), context(config), Dispatcher({}))
    done = trio.Event()

    async def run() -> None:
        await connection.run()
        done.set()

    start = trio.current_time()
    nursery.start_soon(run)
    await trio.sleep(100)
    await client.send_all(encode_frame(request(77, 1)))  # activity resets the idle clock
    await done.wait()
    assert trio.current_time() - start == pytest.approx(220, abs=1)
    assert connection.close_reason == "idle_timeout"


async def test_a_byte_trickle_is_closed_one_idle_timeout_after_its_frame_began(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock, echo: Echo
) -> None:
    client, server = trio.testing.memory_stream_pair()
    config = dataclasses.replace(BrokerConfig(), idle_timeout_s=120.0)
    connection = Connection(server, ("10.0.0.9", 1), context(config), Dispatcher({ECHO: echo}))
    done = trio.Event()

    async def run() -> None:
        await connection.run()
        done.set()

    nursery.start_soon(run)
    frame = encode_frame(request(ECHO, 1))
    start = trio.current_time()
    with capture_logs() as logs:
        for byte in frame[:-1]:  # a byte every 10 s: never idle for 120 s, never a whole frame
            await client.send_all(bytes([byte]))
            with trio.move_on_after(10):
                await done.wait()
            if done.is_set():
                break
        await done.wait()
    assert connection.close_reason == "frame_timeout"
    assert trio.current_time() - start == pytest.approx(120, abs=1)  # the mock clock
    assert echo.seen == []
    assert [e["buffered"] for e in logs if e["event"] == "frame_timeout"] == [12]


async def test_frames_streamed_back_to_back_are_not_a_trickle(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock, echo: Echo
) -> None:
    """A busy client whose writes end mid-frame: every frame completes, so the connection is
    not held by a trickle even though a partial frame is buffered at every moment."""
    client, server = trio.testing.memory_stream_pair()
    config = dataclasses.replace(BrokerConfig(), idle_timeout_s=120.0)
    connection = Connection(server, ("10.0.0.9", 1), context(config), Dispatcher({ECHO: echo}))
    nursery.start_soon(connection.run)
    stream = b"".join(encode_frame(request(ECHO, n)) for n in range(40))
    half = len(encode_frame(request(ECHO, 0))) // 2
    for position in range(0, len(stream), 2 * half):  # a frame and a half, then the rest
        await client.send_all(stream[position : position + 2 * half])
        await trio.sleep(30)
    assert sorted(echo.seen) == list(range(40))
    assert connection.close_reason == "peer_closed"  # still open: nothing closed it
