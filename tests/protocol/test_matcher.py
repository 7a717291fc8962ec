"""Request/response matching by opaque, with caller-owned time."""

from __future__ import annotations

import pytest

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.matcher import PendingRequest, RequestMatcher, RequestTimeoutError


def request(matcher: RequestMatcher) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.HEART_BEAT, opaque=matcher.next_opaque())


def test_opaques_count_from_zero_and_wrap() -> None:
    matcher = RequestMatcher()
    assert [matcher.next_opaque() for _ in range(3)] == [0, 1, 2]
    wrapping = RequestMatcher(first_opaque=(1 << 31) - 1)
    assert [wrapping.next_opaque() for _ in range(2)] == [(1 << 31) - 1, 0]


def test_response_completes_its_request_in_any_order() -> None:
    matcher = RequestMatcher()
    first, second = request(matcher), request(matcher)
    pending_first = matcher.register(first, deadline=10.0)
    pending_second = matcher.register(second, deadline=10.0)
    done: list[int] = []
    pending_first.add_done_callback(lambda p: done.append(p.opaque))
    reply = second.make_response(ResponseCode.SUCCESS)
    assert matcher.on_response(reply) is pending_second
    assert pending_second.result() is reply
    assert not pending_first.done
    assert done == []
    assert matcher.on_response(first.make_response(ResponseCode.SYSTEM_BUSY)) is pending_first
    assert pending_first.result().code == ResponseCode.SYSTEM_BUSY
    assert done == [0]
    assert len(matcher) == 0


def test_unknown_or_repeated_opaque_is_none() -> None:
    matcher = RequestMatcher()
    cmd = request(matcher)
    matcher.register(cmd, deadline=1.0)
    assert matcher.on_response(RemotingCommand(0, opaque=999, flag=1)) is None
    assert matcher.on_response(cmd.make_response(0)) is not None
    assert matcher.on_response(cmd.make_response(0)) is None


def test_duplicate_registration_is_a_programmer_error() -> None:
    matcher = RequestMatcher()
    cmd = request(matcher)
    matcher.register(cmd, deadline=1.0)
    with pytest.raises(ValueError, match="already pending"):
        matcher.register(cmd, deadline=2.0)


def test_expire_fails_only_requests_past_their_deadline() -> None:
    matcher = RequestMatcher()
    early = matcher.register(request(matcher), deadline=5.0)
    late = matcher.register(request(matcher), deadline=9.0)
    assert matcher.next_deadline() == 5.0
    assert matcher.expire(4.9) == []
    assert matcher.expire(5.0) == [early]
    with pytest.raises(RequestTimeoutError, match="opaque=0"):
        early.result()
    assert not late.done
    assert matcher.next_deadline() == 9.0
    assert matcher.on_response(early.request.make_response(0)) is None  # too late: dropped


def test_fail_all_and_callbacks_on_finished_requests() -> None:
    matcher = RequestMatcher()
    pendings = [matcher.register(request(matcher), deadline=1.0) for _ in range(3)]
    error = ConnectionResetError("peer closed")
    assert matcher.fail_all(error) == pendings
    assert matcher.next_deadline() is None
    seen: list[PendingRequest] = []
    pendings[0].add_done_callback(seen.append)  # already done: called at once
    assert seen == [pendings[0]]
    for pending in pendings:
        with pytest.raises(ConnectionResetError):
            pending.result()


def test_result_of_a_pending_request() -> None:
    matcher = RequestMatcher()
    pending = matcher.register(request(matcher), deadline=1.0)
    with pytest.raises(RuntimeError, match="still pending"):
        pending.result()
