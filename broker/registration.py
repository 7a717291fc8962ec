"""The broker's registration with its name servers (`namesrv_addr`), as a 4.9 broker does it.

4.9's `BrokerController.registerBrokerAll` and `BrokerOuterAPI`: the broker sends its whole
topic table (REGISTER_BROKER, `RegisterBrokerBody` with the table's data version) to every name
server when it starts, every `register_name_server_period` ms, and whenever a topic is created,
changed or deleted; on shutdown it sends UNREGISTER_BROKER to each. A broker without WRITE or
READ in `broker_permission` registers every topic with that permission, so the routes say so.

Each name server has its own `NamesrvLink`: one long-lived connection (a 4.9 name server drops
a broker whose registration connection closes), one request at a time on it, a reader that
notices at once when the name server closes it. A connection that fails, a registration that
times out (`register_broker_timeout_mills`) or is refused, closes the link, which reconnects
after a backoff (0.5 s doubling to 30 s, never past the period): a name server that is down
costs its own link only, never the broker's requests or the other links. One log event per
change of state (`namesrv_registered`, `namesrv_unreachable`, `namesrv_lost`, `namesrv_back`),
none per period.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Final

import structlog
import trio

from broker.config import BrokerConfig, HostPort
from broker.topic_config import PERM_READ, PERM_WRITE, TopicConfigManager
from protocol.admin_topic import DataVersion, TopicConfigData
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import HeaderFieldError, RemotingProtocolError
from protocol.frame import FrameDecoder, encode_frame
from protocol.namesrv_headers import RegisterBrokerResponseHeader, UnRegisterBrokerRequestHeader
from protocol.register_broker import RegisterBrokerBody, register_broker_request

log = structlog.get_logger()

BACKOFF_MIN_S: Final = 0.5
BACKOFF_MAX_S: Final = 30.0
#: how long a shutdown waits for each name server to answer UNREGISTER_BROKER (4.9: 3 s)
UNREGISTER_TIMEOUT_S: Final = 3.0
RECEIVE_SIZE: Final = 64 * 1024
_opaques = itertools.count(1)


class RegistrationError(Exception):
    """Why a link stopped: the name server refused, went silent or closed the connection."""


class Registration:
    """The broker's side of every name server in `namesrv_addr`."""

    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicConfigManager,
        broker_addr: str,
        *,
        ha_port: int | None = None,
        on_master: Callable[[str, str], None] | None = None,
    ) -> None:
        self.config = config
        self.topics = topics
        self.broker_addr = broker_addr
        ip, _, port = broker_addr.rpartition(":")
        #: 4.9 announces brokerIP2 and the HA port: the port bound for slaves, else listen + 1
        self.ha_server_addr = f"{ip}:{int(port) + 1 if ha_port is None else ha_port}"
        #: called with a registration answer's `haServerAddr` and `masterAddr` (a slave's master)
        self.on_master = on_master
        self.links = [NamesrvLink(addr, self) for addr in config.namesrv_addrs]
        self._body: tuple[tuple[int, int], RegisterBrokerBody] | None = None
        topics.listeners.append(self.topics_changed)

    def topics_changed(self) -> None:
        """A topic was created, changed or deleted: every link registers again soon."""
        for link in self.links:
            link.wake.set()

    def body(self) -> RegisterBrokerBody:
        """The topic table as it is now, built once per data version."""
        version = self.topics.data_version
        key = (version.counter, version.timestamp)
        if self._body is not None and self._body[0] == key:
            return self._body[1]
        permission = self.config.broker_permission
        readable_writable = permission & PERM_READ and permission & PERM_WRITE
        topics = tuple(
            topic.data()
            if readable_writable
            else TopicConfigData(
                name,
                topic.read_queue_nums,
                topic.write_queue_nums,
                permission,
                topic.topic_filter_type,
                topic.topic_sys_flag,
                topic.order,
            )
            for name, topic in sorted(self.topics.topics().items())
        )
        body = RegisterBrokerBody(topics, DataVersion(version.counter, version.timestamp))
        self._body = (key, body)
        return body

    def register_request(self) -> RemotingCommand:
        config = self.config
        return register_broker_request(
            config.broker_cluster_name,
            self.broker_addr,
            config.broker_name,
            config.broker_id,
            self.ha_server_addr,
            self.body(),
            opaque=next(_opaques),
        )

    def unregister_request(self) -> RemotingCommand:
        config = self.config
        header = UnRegisterBrokerRequestHeader(
            config.broker_name, self.broker_addr, config.broker_cluster_name, config.broker_id
        )
        return RemotingCommand.request(
            RequestCode.UNREGISTER_BROKER, header.to_ext_fields(), opaque=next(_opaques)
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep every link registered until cancelled."""
        async with trio.open_nursery() as nursery:
            for link in self.links:
                nursery.start_soon(link.run)
            task_status.started()

    async def unregister_all(self) -> None:
        """UNREGISTER_BROKER to every name server connected now, side by side; a name server
        that does not answer within `UNREGISTER_TIMEOUT_S` is left to expire the broker."""
        async with trio.open_nursery() as nursery:
            for link in self.links:
                nursery.start_soon(link.unregister)


class NamesrvLink:
    """One name server: its connection, its state, its wake-up for topic changes."""

    def __init__(self, addr: HostPort, registration: Registration) -> None:
        self.addr = addr
        self.registration = registration
        #: "new" (never registered), "up", "down"
        self.state = "new"
        self.registrations = 0
        self.wake = trio.Event()
        self._stream: trio.SocketStream | None = None
        self._answers: trio.MemoryReceiveChannel[RemotingCommand] | None = None
        self._lock = trio.Lock()
        self._stopping = False

    @property
    def timeout_s(self) -> float:
        return self.registration.config.register_broker_timeout_mills / 1000

    async def run(self) -> None:
        period_s = self.registration.config.register_name_server_period / 1000
        cap = max(BACKOFF_MIN_S, min(BACKOFF_MAX_S, period_s))
        backoff = BACKOFF_MIN_S
        while not self._stopping:
            before = self.registrations
            reason = await self._connected_session()
            if self._stopping:
                return
            if self.registrations > before:
                backoff = BACKOFF_MIN_S
            self._went_down(reason, backoff)
            await trio.sleep(backoff)
            backoff = min(backoff * 2, cap)

    async def _connected_session(self) -> str:
        """Connect, register, and register again every period or topic change until the
        connection fails; why it did."""
        try:
            with trio.fail_after(self.timeout_s):
                stream = await trio.open_tcp_stream(self.addr.host, self.addr.port)
        except (OSError, trio.TooSlowError) as exc:
            return f"connect failed: {exc or type(exc).__name__}"
        send, receive = trio.open_memory_channel[RemotingCommand](16)
        outcome: list[str] = []
        async with stream, trio.open_nursery() as nursery:
            self._stream, self._answers = stream, receive
            nursery.start_soon(self._read, stream, send, outcome, nursery.cancel_scope)
            nursery.start_soon(self._keep_registered, outcome, nursery.cancel_scope)
        self._stream = self._answers = None
        return outcome[0] if outcome else "stopped"

    async def _read(
        self,
        stream: trio.SocketStream,
        send: trio.MemorySendChannel[RemotingCommand],
        outcome: list[str],
        scope: trio.CancelScope,
    ) -> None:
        decoder = FrameDecoder(max_frame_length=self.registration.config.max_frame_length)
        try:
            while data := await stream.receive_some(RECEIVE_SIZE):
                for command in decoder.feed(data):
                    if command.is_response:
                        send.send_nowait(command)
            outcome.append("closed by the name server")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            outcome.append(f"connection failed: {exc or type(exc).__name__}")
        except (RemotingProtocolError, trio.WouldBlock) as exc:
            outcome.append(f"unexpected data from the name server: {exc}")
        scope.cancel()

    async def _keep_registered(self, outcome: list[str], scope: trio.CancelScope) -> None:
        period_s = self.registration.config.register_name_server_period / 1000
        while True:
            self.wake = trio.Event()
            try:
                await self._register()
            except RegistrationError as exc:
                outcome.append(str(exc))
                scope.cancel()
                return
            with trio.move_on_after(period_s):
                await self.wake.wait()

    async def _register(self) -> None:
        registration = self.registration
        answer = await self._call(registration.register_request, registering=True)
        if answer.code != ResponseCode.SUCCESS:
            raise RegistrationError(f"registration refused: {answer.code} {answer.remark}")
        self.registrations += 1
        if registration.on_master is not None:
            try:
                master = RegisterBrokerResponseHeader.from_ext_fields(answer.ext_fields or {})
            except HeaderFieldError as exc:
                log.warning("namesrv_answer_refused", namesrv=str(self.addr), error=str(exc))
            else:
                registration.on_master(master.ha_server_addr or "", master.master_addr or "")
        if self.state != "up":
            log.info(
                "namesrv_registered" if self.state == "new" else "namesrv_back",
                namesrv=str(self.addr),
                broker_addr=registration.broker_addr,
                broker_name=registration.config.broker_name,
                topics=len(registration.body().topics),
            )
            self.state = "up"

    async def _call(
        self, build: Callable[[], RemotingCommand], *, registering: bool = False
    ) -> RemotingCommand:
        """Send the request `build` makes on the live connection and wait for its answer; a
        registration once the link is stopping is not sent (it would undo the unregistration)."""
        async with self._lock:
            stream, answers = self._stream, self._answers
            if stream is None or answers is None:
                raise RegistrationError("not connected")
            if registering and self._stopping:
                raise RegistrationError("the broker is shutting down")
            request = build()
            try:
                with trio.fail_after(self.timeout_s):
                    await stream.send_all(encode_frame(request))
                    while True:
                        answer = await answers.receive()
                        if answer.opaque == request.opaque:
                            return answer
            except trio.TooSlowError:
                raise RegistrationError(f"no answer within {self.timeout_s:g} s") from None
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.EndOfChannel):
                raise RegistrationError("connection failed while sending") from None

    def _went_down(self, reason: str, retry_s: float) -> None:
        if self.state == "down":
            return
        log.warning(
            "namesrv_lost" if self.state == "up" else "namesrv_unreachable",
            namesrv=str(self.addr),
            reason=reason,
            retry_s=retry_s,
        )
        self.state = "down"

    async def unregister(self) -> None:
        """UNREGISTER_BROKER on the live connection, if there is one; stop the link."""
        self._stopping = True
        if self._stream is None:
            return
        with trio.move_on_after(UNREGISTER_TIMEOUT_S):
            try:
                answer = await self._call(self.registration.unregister_request)
            except RegistrationError as exc:
                log.warning("namesrv_unregister_failed", namesrv=str(self.addr), reason=str(exc))
                return
            log.info(
                "namesrv_unregistered",
                namesrv=str(self.addr),
                code=answer.code,
                remark=answer.remark,
            )
