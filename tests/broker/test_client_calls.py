"""`ClientCalls`, the broker's request-and-answer to a client: an answer is matched by opaque,
a connection that cannot take the request or closes fails the call at once, and at most
`MAX_WAITING` calls wait on one connection."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from broker.client_calls import MAX_WAITING, ClientCallError, ClientCalls
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand


def running_info() -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, oneway=True)


async def test_the_answer_with_the_opaque_sent_is_returned() -> None:
    sent: list[RemotingCommand] = []

    def push(command: RemotingCommand) -> bool:
        sent.append(command)
        return True

    calls = ClientCalls(push)
    async with trio.open_nursery() as nursery:
        answers: list[RemotingCommand] = []

        async def ask() -> None:
            answers.append(await calls.ask(running_info(), 5))

        nursery.start_soon(ask)
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        first, second = sent
        assert not first.is_oneway and first.opaque != second.opaque
        stray = second.make_response(ResponseCode.SUCCESS, "stray")
        stray.opaque = 0
        assert not calls.on_response(stray)
        assert calls.on_response(second.make_response(ResponseCode.SUCCESS, "second"))
        assert calls.on_response(first.make_response(ResponseCode.SYSTEM_ERROR, "first"))
    assert sorted(a.remark or "" for a in answers) == ["first", "second"]
    assert not calls.on_response(first.make_response(ResponseCode.SUCCESS))  # answered once


async def test_a_connection_that_cannot_take_it_or_closes_fails_the_call() -> None:
    with pytest.raises(ClientCallError, match="closing or congested"):
        await ClientCalls(lambda _command: False).ask(running_info(), 5)
    calls = ClientCalls(lambda _command: True)
    async with trio.open_nursery() as nursery:
        errors: list[ClientCallError] = []

        async def ask() -> None:
            with pytest.raises(ClientCallError) as failed:
                await calls.ask(running_info(), 60)
            errors.append(failed.value)

        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        calls.close()
    assert "closed before it answered" in str(errors[0]) and not errors[0].timed_out
    with pytest.raises(ClientCallError, match="is closed"):
        await calls.ask(running_info(), 5)


async def test_at_most_max_waiting_calls_wait_on_one_connection() -> None:
    calls = ClientCalls(lambda _command: True)
    async with trio.open_nursery() as nursery:
        for _ in range(MAX_WAITING):
            nursery.start_soon(calls.ask, running_info(), 60)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(ClientCallError, match=f"{MAX_WAITING} calls already wait"):
            await calls.ask(running_info(), 60)
        nursery.cancel_scope.cancel()


async def test_a_slow_client_times_out() -> None:
    calls = ClientCalls(lambda _command: True)
    with pytest.raises(ClientCallError) as slow:
        await calls.ask(running_info(), 0.05)
    assert slow.value.timed_out
