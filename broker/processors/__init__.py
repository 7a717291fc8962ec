"""Request processors, registered by request code.

A processor turns one request into its response (or None: nothing to send). It may raise
`HeaderFieldError` for bad input (answered with that code and remark) or any other exception
(answered SYSTEM_ERROR with the exception text and logged with its traceback); it never sees the
socket. `RequestContext` is what it may know about the connection. A processor may also be an
`InlineProcessor`: the connection then offers it each request first, without starting a task.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from broker.client_calls import ClientCallError
from protocol.command import RemotingCommand

if TYPE_CHECKING:
    from broker.context import BrokerContext


async def _cannot_ask(_command: RemotingCommand, _timeout_s: float) -> RemotingCommand:
    raise ClientCallError("this connection cannot take requests from the broker")


@dataclass(frozen=True, slots=True)
class RequestContext:
    """The broker's shared state plus the connection a request arrived on."""

    broker: BrokerContext
    conn_id: int
    #: peer address as (ip, port); an IPv4-mapped IPv6 peer is reported as IPv4
    remote: tuple[str, int]
    #: queues a request from the broker to this peer (CHECK_TRANSACTION_STATE); False when the
    #: connection cannot take it (closing, or too much unsent already)
    push: Callable[[RemotingCommand], bool] = lambda _command: False
    #: sends a request from the broker to this peer and waits for its answer at most the given
    #: seconds (`broker.client_calls`); raises `ClientCallError` when none comes
    ask: Callable[[RemotingCommand, float], Awaitable[RemotingCommand]] = _cannot_ask

    @property
    def remote_text(self) -> str:
        ip, port = self.remote
        return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


class RequestProcessor(Protocol):
    async def process(
        self, request: RemotingCommand, ctx: RequestContext
    ) -> RemotingCommand | None: ...


#: how an inline processor answers: (the request, its response or None for no answer); a
#: response may come as its whole encoded frame (a SUCCESS answer, which nothing logs)
Respond = Callable[[RemotingCommand, RemotingCommand | bytes | None], None]


@runtime_checkable
class InlineProcessor(Protocol):
    """A processor that can take a request without a task of its own."""

    def submit_burst(
        self, requests: list[RemotingCommand], ctx: RequestContext, respond: Respond
    ) -> list[RemotingCommand]:
        """Start `requests` (frames of one receive, in order) and return those that need
        `process` (an await), untouched: each of the others gets `respond` called exactly once,
        later or before this returns. Raises only before handing any request on."""
        ...

    async def process(
        self, request: RemotingCommand, ctx: RequestContext
    ) -> RemotingCommand | None: ...
