"""One log event per refused request, rate limited per client address and response code.

A request answered with an error code (an illegal topic, a bad header field, a full disk, a busy
writer) is logged as `request_refused` with the request code, the response code and the remark,
so an operator can see why a client fails without a packet capture. A client that repeats the
same mistake thousands of times a second must not flood the log: per connection (client address)
and response code at most `burst` events are written per `window_s`, and at most `global_burst`
in all per second; the rest are counted and the next event written for that key carries
`suppressed=N`. The table of keys is bounded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import structlog

from protocol.codes import RequestCode, ResponseCode

log = structlog.get_logger()

#: answers that are a normal outcome, not a refusal: nothing to tell an operator
NOT_REFUSALS: Final = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.PULL_NOT_FOUND,
        ResponseCode.PULL_RETRY_IMMEDIATELY,
        ResponseCode.PULL_OFFSET_MOVED,
        ResponseCode.QUERY_NOT_FOUND,
    }
)
MAX_KEYS: Final = 4096


class _Window:
    __slots__ = ("logged", "started", "suppressed")

    def __init__(self, now: float) -> None:
        self.started = now
        self.logged = 0
        self.suppressed = 0


class RefusalLog:
    """Decides, per refusal, whether to write it; see the module docstring."""

    def __init__(
        self,
        *,
        burst: int = 10,
        window_s: float = 10.0,
        global_burst: int = 100,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.window_s = window_s
        self.global_burst = global_burst
        self._clock = clock
        self._windows: dict[tuple[tuple[str, int], int], _Window] = {}
        self._second = _Window(float("-inf"))

    def refused(
        self, remote: tuple[str, int], request_code: int, response_code: int, remark: str | None
    ) -> bool:
        """Record one refusal from `remote` (ip, port); True when it was written to the log."""
        if response_code in NOT_REFUSALS:
            return False
        now = self._clock()
        if now - self._second.started >= 1.0:
            self._second = _Window(now)
        key = (remote, response_code)
        window = self._windows.get(key)
        if window is None or now - window.started >= self.window_s:
            suppressed = window.suppressed if window is not None else 0
            if window is None and len(self._windows) >= MAX_KEYS:
                self._windows.clear()  # many distinct clients: forget old windows, stay bounded
            window = self._windows[key] = _Window(now)
        else:
            suppressed = 0
        if window.logged >= self.burst or self._second.logged >= self.global_burst:
            window.suppressed += 1
            return False
        window.logged += 1
        self._second.logged += 1
        log.info(
            "request_refused",
            # explicit: a response from the store's callback runs outside the connection's context
            remote=f"{remote[0]}:{remote[1]}",
            request=RequestCode.name_of(request_code),
            response=ResponseCode.name_of(response_code),
            remark=remark,
            **({"suppressed": suppressed} if suppressed else {}),
        )
        return True
