"""Request processors, registered by request code.

A processor turns one request into its response (or None: nothing to send). It may raise
`HeaderFieldError` for bad input (answered with that code and remark) or any other exception
(answered SYSTEM_ERROR with the exception text and logged with its traceback); it never sees the
socket. `RequestContext` is what it may know about the connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from protocol.command import RemotingCommand

if TYPE_CHECKING:
    from broker.context import BrokerContext


@dataclass(frozen=True, slots=True)
class RequestContext:
    """The broker's shared state plus the connection a request arrived on."""

    broker: BrokerContext
    conn_id: int
    #: peer address as (ip, port); an IPv4-mapped IPv6 peer is reported as IPv4
    remote: tuple[str, int]

    @property
    def remote_text(self) -> str:
        ip, port = self.remote
        return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


class RequestProcessor(Protocol):
    async def process(
        self, request: RemotingCommand, ctx: RequestContext
    ) -> RemotingCommand | None: ...
