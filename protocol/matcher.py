"""Matching responses to requests by opaque, sans-IO (kafka-python's `KafkaProtocol` shape).

The caller owns time and I/O: it asks `next_opaque()`, registers the request with a deadline,
hands every incoming response to `on_response`, calls `expire(now)` from its timer and
`fail_all(exc)` when the connection goes away. A `PendingRequest` then holds the response or the
error; done-callbacks let a transport wake the waiting task (the trio client sets an Event).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .command import RemotingCommand

_OPAQUE_LIMIT = 1 << 31


class RequestTimeoutError(Exception):
    """No response arrived before the request's deadline."""


@dataclass(slots=True, eq=False)
class PendingRequest:
    request: RemotingCommand
    deadline: float
    response: RemotingCommand | None = None
    error: BaseException | None = None
    _callbacks: list[Callable[[PendingRequest], None]] = field(default_factory=list)

    @property
    def opaque(self) -> int:
        return self.request.opaque

    @property
    def done(self) -> bool:
        return self.response is not None or self.error is not None

    def add_done_callback(self, callback: Callable[[PendingRequest], None]) -> None:
        """Call `callback(self)` once the request is done (at once if it already is)."""
        if self.done:
            callback(self)
        else:
            self._callbacks.append(callback)

    def result(self) -> RemotingCommand:
        """The response; raises the stored error, or `RuntimeError` if still pending."""
        if self.error is not None:
            raise self.error
        if self.response is None:
            raise RuntimeError(f"request opaque={self.opaque} is still pending")
        return self.response

    def _finish(self, response: RemotingCommand | None, error: BaseException | None) -> None:
        self.response = response
        self.error = error
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)


class RequestMatcher:
    """Pending requests of one connection, keyed by opaque."""

    __slots__ = ("_next_opaque", "_pending")

    def __init__(self, first_opaque: int = 0) -> None:
        self._next_opaque = first_opaque
        self._pending: dict[int, PendingRequest] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def next_opaque(self) -> int:
        """A fresh request id: counts up from 0 (as the Java and C++ clients) and wraps at 2**31."""
        opaque = self._next_opaque
        self._next_opaque = (opaque + 1) % _OPAQUE_LIMIT
        return opaque

    def register(self, command: RemotingCommand, deadline: float) -> PendingRequest:
        """Track `command` until its response or `deadline`; a duplicate opaque is `ValueError`."""
        if command.opaque in self._pending:
            raise ValueError(f"opaque {command.opaque} is already pending")
        pending = PendingRequest(command, deadline)
        self._pending[command.opaque] = pending
        return pending

    def on_response(self, response: RemotingCommand) -> PendingRequest | None:
        """Complete the request `response` answers; None if no request has its opaque."""
        pending = self._pending.pop(response.opaque, None)
        if pending is not None:
            pending._finish(response, None)
        return pending

    def expire(self, now: float) -> list[PendingRequest]:
        """Fail every request whose deadline is at or before `now` with `RequestTimeoutError`."""
        expired = [p for p in self._pending.values() if p.deadline <= now]
        for pending in expired:
            del self._pending[pending.opaque]
            pending._finish(
                None, RequestTimeoutError(f"no response to opaque={pending.opaque} in time")
            )
        return expired

    def next_deadline(self) -> float | None:
        """The earliest deadline among pending requests, for the caller's timer."""
        return min((p.deadline for p in self._pending.values()), default=None)

    def fail_all(self, exc: BaseException) -> list[PendingRequest]:
        """Fail every pending request with `exc` (the connection is gone)."""
        failed = list(self._pending.values())
        self._pending.clear()
        for pending in failed:
            pending._finish(None, exc)
        return failed
