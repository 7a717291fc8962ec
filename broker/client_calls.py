"""Requests the broker sends to a client and waits for the answer of (4.9's `invokeSync`).

GET_CONSUMER_RUNNING_INFO is relayed: the broker asks the consumer's own connection and answers
the admin with what the consumer said. `ClientCalls` is that round trip for one connection: a
request goes out through the connection's outbox (`Connection.push`) with an opaque of the
broker's own, the read loop hands back a response carrying it (`on_response`), and the caller
waits at most its timeout. At most `MAX_WAITING` calls wait on one connection at a time, so a
client that never answers cannot grow the table. A call ends in `ClientCallError` when the
connection cannot take the request, the time is up, or the connection closes first.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Final

import trio

from protocol.command import RemotingCommand

MAX_WAITING: Final = 64
_OPAQUE_MASK: Final = 0x7FFFFFFF


class ClientCallError(Exception):
    """A call to a client that got no answer; `timed_out` when the client was too slow."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class _Waiting:
    __slots__ = ("done", "response")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.response: RemotingCommand | None = None


class ClientCalls:
    """The calls waiting on one connection; `push` queues a frame on it (False: cannot)."""

    def __init__(self, push: Callable[[RemotingCommand], bool]) -> None:
        self._push = push
        self._opaques = itertools.count(1)
        self._waiting: dict[int, _Waiting] = {}
        self._closed = False

    async def ask(self, command: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send `command` (its opaque is set here) and return the client's response."""
        if self._closed:
            raise ClientCallError("the client's connection is closed")
        if len(self._waiting) >= MAX_WAITING:
            raise ClientCallError(f"{MAX_WAITING} calls already wait on this client")
        opaque = next(self._opaques) & _OPAQUE_MASK
        command.opaque = opaque
        command.flag &= ~2  # an answer is wanted
        waiting = self._waiting[opaque] = _Waiting()
        try:
            if not self._push(command):
                raise ClientCallError("the client's connection is closing or congested")
            with trio.move_on_after(timeout_s):
                await waiting.done.wait()
        finally:
            self._waiting.pop(opaque, None)
        if waiting.response is not None:
            return waiting.response
        if self._closed:
            raise ClientCallError("the client's connection closed before it answered")
        raise ClientCallError(f"no answer within {timeout_s:g} s", timed_out=True)

    def on_response(self, command: RemotingCommand) -> bool:
        """Hand a response from the client to its caller; False when no call waits for it."""
        waiting = self._waiting.pop(command.opaque, None)
        if waiting is None:
            return False
        waiting.response = command
        waiting.done.set()
        return True

    def close(self) -> None:
        """The connection is done: every waiting call fails now."""
        self._closed = True
        for waiting in self._waiting.values():
            waiting.done.set()
        self._waiting.clear()
