"""RefusalLog: one `request_refused` event per refusal, rate limited per client and code."""

from __future__ import annotations

from structlog.testing import capture_logs

from broker.refusals import MAX_KEYS, RefusalLog
from protocol.codes import RequestCode, ResponseCode

SEND = RequestCode.SEND_MESSAGE_V2
ILLEGAL = ResponseCode.MESSAGE_ILLEGAL


A = ("10.0.0.1", 40001)
B = ("10.0.0.1", 40002)  # the same client, another connection


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_refusal_is_one_event_with_codes_and_remark() -> None:
    refusals = RefusalLog()
    with capture_logs() as logs:
        assert refusals.refused(A, SEND, ILLEGAL, "the topic is illegal")
    assert logs == [
        {
            "event": "request_refused",
            "log_level": "info",
            "remote": "10.0.0.1:40001",
            "request": "SEND_MESSAGE_V2",
            "response": "MESSAGE_ILLEGAL",
            "remark": "the topic is illegal",
        }
    ]


def test_normal_outcomes_are_not_refusals() -> None:
    refusals = RefusalLog()
    with capture_logs() as logs:
        for code in (
            ResponseCode.SUCCESS,
            ResponseCode.PULL_NOT_FOUND,
            ResponseCode.QUERY_NOT_FOUND,
        ):
            assert not refusals.refused(A, SEND, code, None)
    assert logs == []


def test_a_repeated_refusal_is_limited_per_window_and_the_rest_counted() -> None:
    clock = Clock()
    refusals = RefusalLog(burst=3, window_s=10.0, clock=clock)
    with capture_logs() as logs:
        written = [refusals.refused(A, SEND, ILLEGAL, "x") for _ in range(50)]
        # another client and another code have their own windows
        assert refusals.refused(B, SEND, ILLEGAL, "x")
        assert refusals.refused(A, SEND, ResponseCode.SYSTEM_BUSY, "busy")
        clock.now += 10.0
        assert refusals.refused(A, SEND, ILLEGAL, "x")
    assert written == [True] * 3 + [False] * 47
    assert len(logs) == 6
    assert logs[-1]["suppressed"] == 47
    assert all("suppressed" not in entry for entry in logs[:-1])


def test_the_key_table_stays_bounded() -> None:
    refusals = RefusalLog()
    with capture_logs():
        for n in range(MAX_KEYS * 3):
            refusals.refused((f"10.0.{n >> 8}.{n & 255}", n), SEND, ILLEGAL, "x")
    assert len(refusals._windows) <= MAX_KEYS


def test_all_connections_together_are_limited_per_second() -> None:
    clock = Clock()
    refusals = RefusalLog(global_burst=5, clock=clock)
    with capture_logs() as logs:
        written = [refusals.refused(("10.0.0.9", port), SEND, ILLEGAL, "x") for port in range(20)]
        clock.now += 1.0
        assert refusals.refused(("10.0.0.9", 1), SEND, ILLEGAL, "x")
    assert written == [True] * 5 + [False] * 15
    assert len(logs) == 6
