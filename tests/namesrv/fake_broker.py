"""Raw remoting requests to a name server, as a 4.9 broker and clients build them.

`register_request` builds REGISTER_BROKER through `protocol.register_broker`, as a broker of
this project will; `NamesrvConnection` is a bare TCP connection that writes frames and reads
the answer to each, for tests that must see the wire.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from protocol.admin_topic import DataVersion, TopicConfigData
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder, encode_frame
from protocol.register_broker import RegisterBrokerBody, register_broker_request

_opaques = itertools.count(1)
FIRST_VERSION = DataVersion(1, 1000)


def register_request(
    addr: str,
    name: str,
    topics: tuple[TopicConfigData, ...] = (),
    *,
    broker_id: int = 0,
    cluster: str = "DefaultCluster",
    version: DataVersion = FIRST_VERSION,
    compressed: bool = False,
    ha_addr: str | None = None,
) -> RemotingCommand:
    return register_broker_request(
        cluster,
        addr,
        name,
        broker_id,
        ha_addr or addr,
        RegisterBrokerBody(topics, version),
        compressed=compressed,
        opaque=next(_opaques),
    )


def unregister_request(addr: str, name: str, *, cluster: str = "DefaultCluster") -> RemotingCommand:
    fields = {"brokerName": name, "brokerAddr": addr, "clusterName": cluster, "brokerId": "0"}
    return request(RequestCode.UNREGISTER_BROKER, fields)


def request(
    code: int, ext_fields: dict[str, str] | None = None, body: bytes | None = None
) -> RemotingCommand:
    return RemotingCommand.request(code, ext_fields or {}, body, opaque=next(_opaques))


def route_request(topic: str) -> RemotingCommand:
    return request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})


class NamesrvConnection:
    """One TCP connection; `call` writes a request and returns the frame that answers it."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        self.pending: list[RemotingCommand] = []

    async def call(self, command: RemotingCommand, timeout_s: float = 10) -> RemotingCommand:
        with trio.fail_after(timeout_s):
            await self.stream.send_all(encode_frame(command))
            return await self.receive()

    async def receive(self) -> RemotingCommand:
        while not self.pending:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError("the name server closed the connection")
            self.pending += self.decoder.feed(data)
        return self.pending.pop(0)

    async def closed_by_peer(self, timeout_s: float = 10) -> bool:
        """True once the name server closes the connection (nothing else arrives first)."""
        with trio.fail_after(timeout_s):
            try:
                return await self.stream.receive_some(65536) == b""
            except trio.BrokenResourceError:
                return True


@asynccontextmanager
async def connect(port: int) -> AsyncIterator[NamesrvConnection]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        yield NamesrvConnection(stream)
