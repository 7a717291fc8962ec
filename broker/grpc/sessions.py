"""The sessions of RocketMQ 5 clients: Heartbeat, NotifyClientTermination and Telemetry.

A client names itself in the `x-mq-client-id` metadata of every call. Its Telemetry stream
carries its `Settings` first; the broker answers with the settings it enforces (a producer's
maximum body size = `max_message_size`; a consumer's retry policy from its subscription group,
receive batch size and long-polling timeout), and the client starts only once that answer came.

A producer's session is also a channel of `broker.producers` for each topic it publishes: a
5.x half message carries its topic as producer group (as 5.x's proxy stores it), so the
transaction check finds the session and the check goes down the Telemetry stream as a
`RecoverOrphanedTransactionCommand`. A session ends with its stream (or the connection under
it) or NotifyClientTermination. The table is bounded: `MAX_SESSIONS` in all, and a connection
beyond `MAX_SESSIONS_PER_CONNECTION` is refused.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

import structlog
import trio

from broker.context import BrokerContext
from broker.grpc.held import held_receives
from broker.grpc.methods import CallContext, Message
from broker.grpc.renew import renewals
from broker.grpc.status import ok, status
from broker.grpc.transaction_ids import check_command_to_telemetry
from broker.producer_manager import Channel
from protocol.codes import LanguageCode
from protocol.command import RemotingCommand
from protocol.v2 import load

log = structlog.get_logger()

CLIENT_ID_KEY: Final = "x-mq-client-id"
MAX_SESSIONS: Final = 10_000
MAX_SESSIONS_PER_CONNECTION: Final = 64
#: commands (transaction checks) queued for one session's stream before more are dropped
OUTBOX: Final = 256
RECEIVE_BATCH_SIZE: Final = 32
LONG_POLLING_TIMEOUT_S: Final = 20
#: the 5.x producer's own send attempts, told back to it in the backoff policy
PRODUCER_MAX_ATTEMPTS: Final = 3


@dataclass(slots=True)
class Session:
    client_id: str
    conn_id: int
    peer: tuple[str, int]
    client_type: str = "CLIENT_TYPE_UNSPECIFIED"
    group: str = ""
    topics: tuple[str, ...] = ()
    outbox: trio.MemorySendChannel[Message] | None = field(default=None, repr=False)


def _peer(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port) if port.isdigit() else 0


def _key(conn_id: int) -> int:
    """The producer table's key for a gRPC connection (negative: apart from remoting ids)."""
    return -conn_id


class SessionService:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        #: (connection id, client id) -> session
        self.sessions: dict[tuple[int, str], Session] = {}

    def _session(self, context: CallContext) -> Session | None:
        """The caller's session, made if new (only Telemetry makes them: a session lives as
        long as its stream, which ends with the connection)."""
        client_id = context.metadata.get(CLIENT_ID_KEY, "")
        if not client_id:
            return None
        key = (context.conn_id, client_id)
        found = self.sessions.get(key)
        if found is not None:
            return found
        mine = sum(1 for conn, _ in self.sessions if conn == context.conn_id)
        if len(self.sessions) >= MAX_SESSIONS or mine >= MAX_SESSIONS_PER_CONNECTION:
            log.warning("grpc_sessions_limit", sessions=len(self.sessions), client_id=client_id)
            return None
        session = Session(client_id, context.conn_id, _peer(context.peer))
        self.sessions[key] = session
        return session

    def _register_producer(self, session: Session) -> None:
        outbox = session.outbox
        if session.client_type != "PRODUCER" or outbox is None:
            return
        push = _pusher(outbox)
        now = trio.current_time()
        for topic in session.topics:
            channel = Channel(
                _key(session.conn_id), session.peer, push, now, session.client_id,
                LanguageCode.PYTHON, 0,
            )  # fmt: skip
            self.broker.producers.register_channel(topic, channel)

    def end(self, session: Session) -> None:
        if self.sessions.pop((session.conn_id, session.client_id), None) is None:
            return  # ended already (NotifyClientTermination, then its stream)
        if not any(conn == session.conn_id for conn, _ in self.sessions):
            self.broker.producers.connection_closed(_key(session.conn_id))
        if session.outbox is not None:
            session.outbox.close()
        log.info("grpc_client_gone", client_id=session.client_id, group=session.group)

    # -- RPCs -------------------------------------------------------------------------------

    async def heartbeat(self, request: Message, context: CallContext) -> Message:
        _, service = load()
        client_id = context.metadata.get(CLIENT_ID_KEY, "")
        if not client_id:
            return service.HeartbeatResponse(
                status=status("CLIENT_ID_REQUIRED", f"metadata {CLIENT_ID_KEY} is required")
            )
        session = self.sessions.get((context.conn_id, client_id))
        if session is None:  # its Telemetry stream is not open (yet): nothing to refresh
            return service.HeartbeatResponse(status=ok())
        if request.group.name:
            session.group = request.group.name
        self._register_producer(session)
        return service.HeartbeatResponse(status=ok())

    async def notify_client_termination(self, request: Message, context: CallContext) -> Message:
        _, service = load()
        client_id = context.metadata.get(CLIENT_ID_KEY, "")
        if not client_id:
            return service.NotifyClientTerminationResponse(
                status=status("CLIENT_ID_REQUIRED", f"metadata {CLIENT_ID_KEY} is required")
            )
        session = self.sessions.get((context.conn_id, client_id))
        if session is not None:
            self.end(session)
        if self.broker.pop is not None:  # its receives held: answered now, not at their time
            held_receives(self.broker.pop).end(context.conn_id, client_id)
        return service.NotifyClientTerminationResponse(status=ok())

    async def telemetry(
        self,
        requests: AsyncIterator[Message],
        send: Callable[[Message], Awaitable[None]],
        context: CallContext,
    ) -> None:
        _, service = load()
        session = self._session(context)
        if session is None:
            if context.metadata.get(CLIENT_ID_KEY):
                refusal = status("TOO_MANY_REQUESTS", "too many client sessions")
            else:
                refusal = status("CLIENT_ID_REQUIRED", f"metadata {CLIENT_ID_KEY} is required")
            await send(service.TelemetryCommand(status=refusal))
            return
        outbox, inbox = trio.open_memory_channel[Message](OUTBOX)
        session.outbox = outbox
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_forward, inbox, send)
                if self.broker.pop is not None:
                    keep = renewals(self.broker.pop).keep
                    nursery.start_soon(keep, session.client_id, self.broker.pop)
                async for command in requests:
                    answer = self._on_command(session, command)
                    if answer is not None:
                        await send(answer)
                nursery.cancel_scope.cancel()
        finally:
            self.end(session)

    def _on_command(self, session: Session, command: Message) -> Message | None:
        _, service = load()
        kind = command.WhichOneof("command")
        if kind != "settings":
            # thread stack traces and message verifications answer commands the broker
            # never sends; nothing to do with them
            return None
        settings = command.settings
        definition, _ = load()
        session.client_type = definition.ClientType.Name(settings.client_type)
        if settings.HasField("publishing"):
            session.topics = tuple(r.name for r in settings.publishing.topics)[:64]
        if settings.HasField("subscription"):
            session.group = settings.subscription.group.name
        self._register_producer(session)
        log.info(
            "grpc_client_settings",
            client_id=session.client_id,
            client_type=session.client_type,
            group=session.group,
            topics=len(session.topics),
        )
        return service.TelemetryCommand(status=ok(), settings=self.answer_settings(settings))

    def answer_settings(self, settings: Message) -> Message:
        """The client's settings with what the broker enforces filled in."""
        definition, _ = load()
        answer = definition.Settings()
        answer.CopyFrom(settings)
        config = self.broker.config
        if settings.HasField("publishing"):
            answer.publishing.max_body_size = config.store.max_message_size
            answer.publishing.validate_message_type = False
            answer.backoff_policy.CopyFrom(
                definition.RetryPolicy(
                    max_attempts=PRODUCER_MAX_ATTEMPTS,
                    exponential_backoff=definition.ExponentialBackoff(
                        initial=_duration(0.01), max=_duration(1.0), multiplier=2.0
                    ),
                )
            )
        if settings.HasField("subscription"):
            found = self.broker.groups.find(settings.subscription.group.name)
            retries = found.retry_max_times if found is not None else 16
            answer.subscription.fifo = found is not None and found.consume_message_orderly
            answer.subscription.receive_batch_size = RECEIVE_BATCH_SIZE
            answer.subscription.long_polling_timeout.CopyFrom(_duration(LONG_POLLING_TIMEOUT_S))
            levels = self.broker.delay_levels_ms[2:] or (1000,)
            answer.backoff_policy.CopyFrom(
                definition.RetryPolicy(
                    max_attempts=retries + 1,
                    customized_backoff=definition.CustomizedBackoff(
                        next=[_duration(ms / 1000) for ms in levels]
                    ),
                )
            )
        return answer


def _duration(seconds: float) -> Message:
    from google.protobuf.duration_pb2 import Duration

    whole = int(seconds)
    return Duration(seconds=whole, nanos=round((seconds - whole) * 1e9))


def _pusher(outbox: trio.MemorySendChannel[Message]) -> Callable[[RemotingCommand], bool]:
    def push(command: RemotingCommand) -> bool:
        telemetry = check_command_to_telemetry(command)
        if telemetry is None:
            return False
        try:
            outbox.send_nowait(telemetry)
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            return False
        return True

    return push


async def _forward(
    inbox: trio.MemoryReceiveChannel[Message], send: Callable[[Message], Awaitable[None]]
) -> None:
    async with inbox:
        async for command in inbox:
            await send(command)
