"""A small RocketMQ producer over Trio, for tests and tools (public: users import it).

One TCP connection, many requests in flight on it (matched by opaque through the sans-IO
`protocol.matcher.RequestMatcher`), per-request timeouts. A send answered with one of the four
"send OK" codes returns a `SendResult`; any other code raises `SendError` carrying the code and
remark; no answer in time raises `RequestTimeoutError`; a lost connection `ConnectionClosedError`.

    async with open_producer("127.0.0.1", 10911) as producer:
        result = await producer.send(Message("TopicA", b"hello", tags="TagA"))

`rmq_client.blocking.BlockingProducer` offers the same calls from plain threads.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import os
import secrets
import socket
import ssl
import struct
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Final, TypeVar, cast

import trio

from protocol.acl_signing import SessionCredentials, sign_request
from protocol.batch import BatchEntry, encode_batch_body
from protocol.codes import LanguageCode, RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemotingProtocolError
from protocol.frame import FrameDecoder, encode_frame
from protocol.headers import SendMessageRequestHeaderV2, SendMessageResponseHeader
from protocol.matcher import RequestMatcher, RequestTimeoutError
from protocol.properties import MessageConst, encode_properties
from protocol.route import ClusterInfo, HeartbeatData, ProducerData, TopicRouteData

__all__ = [
    "ConnectionClosedError",
    "Message",
    "Producer",
    "RequestTimeoutError",
    "SendError",
    "SendResult",
    "SendStatus",
    "SessionCredentials",
    "open_producer",
]

DEFAULT_GROUP: Final = "DEFAULT_PRODUCER"
DEFAULT_TIMEOUT_S: Final = 3.0
_SEND_OK_CODES: Final = {
    ResponseCode.SUCCESS: "SEND_OK",
    ResponseCode.FLUSH_DISK_TIMEOUT: "FLUSH_DISK_TIMEOUT",
    ResponseCode.FLUSH_SLAVE_TIMEOUT: "FLUSH_SLAVE_TIMEOUT",
    ResponseCode.SLAVE_NOT_AVAILABLE: "SLAVE_NOT_AVAILABLE",
}
T = TypeVar("T")


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


class SendError(Exception):
    """The broker refused the request: `code` (a ResponseCode value) and its `remark`."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"{ResponseCode.name_of(code)} ({code}): {remark}")
        self.code = code
        self.remark = remark


class ConnectionClosedError(Exception):
    """The connection ended before the answer arrived."""


#: what a request raises when it could not reach a broker, or got no answer in time
UNREACHABLE: Final = (
    OSError,
    ConnectionClosedError,
    RemotingProtocolError,
    RequestTimeoutError,
    trio.TooSlowError,
)


@dataclass(frozen=True, slots=True)
class Message:
    topic: str
    body: bytes
    tags: str | None = None
    keys: str | Sequence[str] | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    flag: int = 0
    #: False sends WAIT=false: the broker answers before its flush covers the message
    wait_store_msg_ok: bool = True
    delay_level: int = 0
    #: the queue to send to; -1 lets the broker choose one
    queue_id: int = -1

    def properties_with(self, uniq_key: str) -> dict[str, str]:
        props = dict(self.properties)
        if self.tags:
            props[MessageConst.TAGS] = self.tags
        if self.keys:
            keys = self.keys if isinstance(self.keys, str) else " ".join(self.keys)
            props[MessageConst.KEYS] = keys
        if not self.wait_store_msg_ok:
            props[MessageConst.WAIT_STORE_MSG_OK] = "false"
        if self.delay_level:
            props[MessageConst.DELAY_TIME_LEVEL] = str(self.delay_level)
        props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq_key
        return props


@dataclass(frozen=True, slots=True)
class SendResult:
    status: SendStatus
    #: the client-side unique id(s) (UNIQ_KEY), comma-joined for a batch
    msg_id: str
    #: the broker's offset message id(s), comma-joined for a batch
    offset_msg_id: str
    queue_id: int
    queue_offset: int
    region_id: str | None = None
    trace_on: bool = True


class _UniqueIds:
    """UNIQ_KEY values shaped as the Java client's: ip, pid, a random int, time, counter."""

    def __init__(self) -> None:
        self._prefix = socket.inet_aton("127.0.0.1") + struct.pack(
            ">hi", os.getpid() & 0x7FFF, secrets.randbits(31)
        )
        self._counter = itertools.count()

    def next(self) -> str:
        ms = int(time.time() * 1000) & 0x7FFFFFFF
        tail = struct.pack(">iH", ms, next(self._counter) & 0xFFFF)
        return (self._prefix + tail).hex().upper()


class Producer:
    """A producer on one open connection; use `open_producer` to get one."""

    def __init__(self, stream: trio.abc.Stream, group: str, timeout_s: float) -> None:
        self.stream = stream
        self.group = group
        self.timeout_s = timeout_s
        self.send_code = RequestCode.SEND_MESSAGE_V2
        self._matcher = RequestMatcher()
        self._write_lock = trio.StrictFIFOLock()
        self._ids = _UniqueIds()
        self._closed: BaseException | None = None
        #: ACL: when set, every request is signed (AccessKey + Signature), as the Java client
        self.credentials: SessionCredentials | None = None
        #: requests the broker sends (CHECK_TRANSACTION_STATE) go here when set; dropped when full
        self.broker_requests: trio.MemorySendChannel[RemotingCommand] | None = None

    async def _reader(self) -> None:
        decoder = FrameDecoder()
        error: BaseException = ConnectionClosedError("connection closed by the broker")
        try:
            while data := await self.stream.receive_some(256 * 1024):
                for command in decoder.feed(cast(bytes, data)):
                    if command.is_response:
                        self._matcher.on_response(command)
                    elif self.broker_requests is not None:
                        with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError):
                            self.broker_requests.send_nowait(command)
        except (trio.BrokenResourceError, trio.ClosedResourceError, RemotingProtocolError) as exc:
            error = ConnectionClosedError(f"connection failed: {exc!r}")
        self._closed = error
        self._matcher.fail_all(error)

    async def request(
        self, command: RemotingCommand, timeout_s: float | None = None
    ) -> RemotingCommand:
        """Send `command` (its opaque is assigned here) and wait for the matching response."""
        if self._closed is not None:
            raise self._closed
        command.opaque = self._matcher.next_opaque()
        deadline = trio.current_time() + (self.timeout_s if timeout_s is None else timeout_s)
        pending = self._matcher.register(command, deadline)
        done = trio.Event()
        pending.add_done_callback(lambda _: done.set())
        await self._write(self._encode(command))
        with trio.move_on_at(deadline):
            await done.wait()
        if not pending.done:
            self._matcher.expire(trio.current_time())
        return pending.result()

    async def oneway(self, command: RemotingCommand) -> None:
        """Send `command` with the oneway flag; nothing comes back."""
        if self._closed is not None:
            raise self._closed
        command.flag |= 2
        command.opaque = self._matcher.next_opaque()
        await self._write(self._encode(command))

    async def reply(self, response: RemotingCommand) -> None:
        """Send `response` to a request the broker sent (`broker_requests`); not signed."""
        await self._write(encode_frame(response))

    def _encode(self, command: RemotingCommand) -> bytes:
        if self.credentials is not None:
            sign_request(command, self.credentials)
        return encode_frame(command)

    async def _write(self, frame: bytes) -> None:
        try:
            async with self._write_lock:
                await self.stream.send_all(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ConnectionClosedError(f"connection failed: {exc!r}") from None

    def _send_command(
        self,
        topic: str,
        body: bytes,
        properties: str,
        *,
        flag: int = 0,
        batch: bool = False,
        queue_id: int = -1,
        sys_flag: int = 0,
    ) -> RemotingCommand:
        header = SendMessageRequestHeaderV2(
            a=self.group,
            b=topic,
            c="TBW102",
            d=4,
            e=queue_id,
            f=sys_flag,
            g=int(time.time() * 1000),
            h=flag,
            i=properties,
            j=0,
            k=False,
            m=batch,
        )
        code = RequestCode.SEND_BATCH_MESSAGE if batch else self.send_code
        return RemotingCommand.request(
            code, header.to_ext_fields(), body, language=LanguageCode.PYTHON
        )

    def _single(self, message: Message, sys_flag: int = 0) -> tuple[RemotingCommand, str]:
        uniq = self._ids.next()
        props = encode_properties(message.properties_with(uniq))
        command = self._send_command(
            message.topic,
            message.body,
            props,
            flag=message.flag,
            queue_id=message.queue_id,
            sys_flag=sys_flag,
        )
        return command, uniq

    async def send(
        self, message: Message, timeout_s: float | None = None, *, sys_flag: int = 0
    ) -> SendResult:
        command, uniq = self._single(message, sys_flag)
        return _send_result(await self.request(command, timeout_s), uniq)

    async def send_oneway(self, message: Message) -> None:
        command, _ = self._single(message)
        await self.oneway(command)

    async def send_batch(
        self, messages: Sequence[Message], timeout_s: float | None = None
    ) -> SendResult:
        """Send messages of one topic as one SEND_BATCH_MESSAGE (stored as separate records)."""
        if not messages or len({m.topic for m in messages}) != 1:
            raise ValueError("a batch needs at least one message, all of one topic")
        uniqs = [self._ids.next() for _ in messages]
        entries = [
            BatchEntry(m.flag, m.body, encode_properties(m.properties_with(u)))
            for m, u in zip(messages, uniqs, strict=True)
        ]
        wait = "" if messages[0].wait_store_msg_ok else encode_properties({"WAIT": "false"})
        command = self._send_command(
            messages[0].topic,
            encode_batch_body(entries),
            wait,
            batch=True,
            queue_id=messages[0].queue_id,
        )
        return _send_result(await self.request(command, timeout_s), ",".join(uniqs))

    async def heartbeat(self, client_id: str = "python-client@0") -> None:
        body = HeartbeatData(client_id, (ProducerData(self.group),)).to_json()
        _expect_success(
            await self.request(RemotingCommand.request(RequestCode.HEART_BEAT, body=body))
        )

    async def get_route(self, topic: str) -> TopicRouteData:
        command = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        response = _expect_success(await self.request(command))
        return TopicRouteData.from_json(response.body or b"{}")

    async def get_cluster_info(self) -> ClusterInfo:
        command = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
        response = _expect_success(await self.request(command))
        return ClusterInfo.from_json(response.body or b"{}")


def _expect_success(response: RemotingCommand) -> RemotingCommand:
    if response.code != ResponseCode.SUCCESS:
        raise SendError(response.code, response.remark)
    return response


def _send_result(response: RemotingCommand, uniq: str) -> SendResult:
    status = _SEND_OK_CODES.get(response.code)  # type: ignore[call-overload]
    if status is None:
        raise SendError(response.code, response.remark)
    header = SendMessageResponseHeader.from_ext_fields(response.ext_fields)
    return SendResult(
        SendStatus(status),
        uniq,
        header.msg_id,
        header.queue_id,
        header.queue_offset,
        response.ext_fields.get(MessageConst.MSG_REGION),
        response.ext_fields.get(MessageConst.TRACE_SWITCH, "true") == "true",
    )


@asynccontextmanager
async def open_producer(
    host: str,
    port: int,
    *,
    group: str = DEFAULT_GROUP,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    credentials: SessionCredentials | None = None,
) -> AsyncIterator[Producer]:
    """Connect to a broker; the connection closes when the block ends.

    With `ssl_context` the connection speaks TLS (`broker.tls.client_ssl_context` builds one);
    a failed handshake raises `ConnectionClosedError`. With `credentials` every request is
    signed for the broker's ACL.
    """
    stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
    if ssl_context is not None:
        stream = await _start_tls(stream, ssl_context, server_hostname or host)
    producer = Producer(stream, group, timeout_s)
    producer.credentials = credentials
    async with stream, trio.open_nursery() as nursery:
        nursery.start_soon(producer._reader)
        try:
            yield producer
        finally:
            nursery.cancel_scope.cancel()


async def _start_tls(
    tcp: trio.abc.Stream, context: ssl.SSLContext, server_hostname: str
) -> trio.SSLStream[trio.abc.Stream]:
    tls = trio.SSLStream(tcp, context, server_hostname=server_hostname)
    try:
        await tls.do_handshake()
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        await trio.aclose_forcefully(tcp)
        raise ConnectionClosedError(f"TLS handshake failed: {exc.__cause__ or exc!r}") from None
    return tls
