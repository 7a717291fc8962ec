"""Requests taken without a task (`InlineProcessor.submit_burst`): answered by callback, out of
order, within the in-flight limit, the frames of one receive handed on together, and beside the
task path on the same connection."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing
from structlog.testing import capture_logs

from broker.config import BrokerConfig
from broker.connection import Connection
from broker.dispatcher import Dispatcher
from broker.processors import RequestContext, RequestProcessor, Respond
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import encode_frame
from tests.broker.test_connection import Echo, Peer, context, request

HELD, DECLINED, BROKEN = 2001, 2002, 2003


class Held:
    """Takes every request inline and answers only when the test says so."""

    def __init__(self) -> None:
        self.waiting: dict[int, tuple[RemotingCommand, Respond]] = {}
        #: the opaques of each burst handed over
        self.bursts: list[list[int]] = []

    def submit_burst(
        self, reqs: list[RemotingCommand], ctx: RequestContext, respond: Respond
    ) -> list[RemotingCommand]:
        self.bursts.append([req.opaque for req in reqs])
        for req in reqs:
            self.waiting[req.opaque] = (req, respond)
        return []

    async def process(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        raise AssertionError("an inline request must not reach process()")

    def answer(self, opaque: int) -> None:
        req, respond = self.waiting.pop(opaque)
        respond(req, req.make_response(ResponseCode.SUCCESS, f"held {opaque}"))


class Declined:
    """Declines inline handling, so the connection runs process() in a task."""

    def __init__(self) -> None:
        self.processed = 0

    def submit_burst(
        self, reqs: list[RemotingCommand], ctx: RequestContext, respond: Respond
    ) -> list[RemotingCommand]:
        return reqs

    async def process(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        self.processed += 1
        await trio.lowlevel.checkpoint()
        return req.make_response(ResponseCode.SUCCESS, "by task")


class Broken:
    def submit_burst(
        self, reqs: list[RemotingCommand], ctx: RequestContext, respond: Respond
    ) -> list[RemotingCommand]:
        raise RuntimeError("table on fire")

    async def process(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        raise AssertionError("unreachable")


@pytest.fixture
def held() -> Held:
    return Held()


@pytest.fixture
def declined() -> Declined:
    return Declined()


@pytest.fixture
async def peer(nursery: trio.Nursery, held: Held, declined: Declined) -> AsyncIterator[Peer]:
    config = dataclasses.replace(BrokerConfig(), max_inflight_per_connection=4)
    client, server = trio.testing.memory_stream_pair()
    processors: dict[int, RequestProcessor] = {
        HELD: held,
        DECLINED: declined,
        BROKEN: Broken(),
        1: Echo(),
    }
    connection = Connection(server, ("10.0.0.9", 4242), context(config), Dispatcher(processors))

    async def run() -> None:
        await connection.run()
        await server.aclose()

    nursery.start_soon(run)
    yield Peer(client)


async def test_inline_answers_leave_in_completion_order(peer: Peer, held: Held) -> None:
    for opaque in (1, 2, 3):
        await peer.send(request(HELD, opaque))
    await trio.testing.wait_all_tasks_blocked()
    assert sorted(held.waiting) == [1, 2, 3]
    for opaque in (3, 1, 2):
        held.answer(opaque)
    answers = [await peer.receive() for _ in range(3)]
    assert [(a.opaque, a.remark) for a in answers] == [(3, "held 3"), (1, "held 1"), (2, "held 2")]


async def test_inline_requests_count_against_the_inflight_limit(peer: Peer, held: Held) -> None:
    for opaque in range(10):
        await peer.send(request(HELD, opaque))
    await trio.testing.wait_all_tasks_blocked()
    assert sorted(held.waiting) == [0, 1, 2, 3]  # max_inflight_per_connection
    held.answer(2)
    await trio.testing.wait_all_tasks_blocked()
    assert sorted(held.waiting) == [0, 1, 3, 4]  # one answer freed one slot
    while held.waiting:
        held.answer(min(held.waiting))
        await trio.testing.wait_all_tasks_blocked()
    assert {(await peer.receive()).opaque for _ in range(10)} == set(range(10))


async def test_declined_requests_run_in_a_task(peer: Peer, declined: Declined) -> None:
    await peer.send(request(DECLINED, 5))
    answer = await peer.receive()
    assert (answer.opaque, answer.remark) == (5, "by task")
    assert declined.processed == 1


async def test_a_failing_submit_is_answered_and_the_connection_lives(peer: Peer) -> None:
    with capture_logs() as logs:
        await peer.send(request(BROKEN, 1))
        failed = await peer.receive()
    assert (failed.code, failed.remark) == (ResponseCode.SYSTEM_ERROR, "table on fire")
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["processor_failed"]
    await peer.send(request(1, 2))
    assert (await peer.receive()).opaque == 2


async def test_the_frames_of_one_receive_are_handed_on_together(peer: Peer, held: Held) -> None:
    await peer.stream.send_all(b"".join(encode_frame(request(HELD, o)) for o in (7, 8, 9)))
    await trio.testing.wait_all_tasks_blocked()
    assert held.bursts == [[7, 8, 9]]
    for opaque in (9, 7, 8):
        held.answer(opaque)
    assert [(await peer.receive()).opaque for _ in range(3)] == [9, 7, 8]


async def test_a_burst_past_the_inflight_limit_is_cut_where_reading_stops(
    peer: Peer, held: Held
) -> None:
    await peer.stream.send_all(b"".join(encode_frame(request(HELD, o)) for o in range(6)))
    await trio.testing.wait_all_tasks_blocked()
    assert held.bursts == [[0, 1, 2, 3]]  # max_inflight_per_connection
    held.answer(0)
    held.answer(1)
    await trio.testing.wait_all_tasks_blocked()
    assert held.bursts == [[0, 1, 2, 3], [4, 5]]


async def test_a_burst_of_mixed_codes_keeps_each_request_with_its_processor(
    peer: Peer, held: Held, declined: Declined
) -> None:
    codes = [(HELD, 1), (DECLINED, 2), (HELD, 3), (1, 4)]
    await peer.stream.send_all(b"".join(encode_frame(request(c, o)) for c, o in codes))
    await trio.testing.wait_all_tasks_blocked()
    assert held.bursts == [[1], [3]]  # runs in frame order: another processor's request between
    held.answer(1)
    held.answer(3)
    answers = {(a := await peer.receive()).opaque: a.remark for _ in range(4)}
    assert answers == {1: "held 1", 2: "by task", 3: "held 3", 4: answers[4]}
    assert declined.processed == 1


async def test_a_failing_burst_answers_each_of_its_requests_once(peer: Peer) -> None:
    with capture_logs():
        await peer.stream.send_all(b"".join(encode_frame(request(BROKEN, o)) for o in (1, 2)))
        answers = [await peer.receive() for _ in range(2)]
    assert sorted((a.opaque, a.code) for a in answers) == [
        (1, ResponseCode.SYSTEM_ERROR),
        (2, ResponseCode.SYSTEM_ERROR),
    ]
    await peer.send(request(1, 3))
    assert (await peer.receive()).opaque == 3
