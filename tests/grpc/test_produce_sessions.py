"""Telemetry and transactions of the RocketMQ 5 service in process against a real broker: the
settings answered, the producer session registered for its topics and dropped with its stream,
EndTransaction's commit, rollback and refusals, and the broker's check sent down the stream."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import trio

from broker.grpc.methods import CallContext, path
from broker.grpc.service import methods
from broker.grpc.sessions import CLIENT_ID_KEY, MAX_SESSIONS_PER_CONNECTION, SessionService
from protocol.admin_group import SubscriptionGroupConfig
from protocol.v2 import load
from tests.conftest import RunningBroker
from tests.grpc.test_produce_handlers import CONTEXT, ENDPOINT, code, message, pull_all, send

definition, service = load()


_TABLES: dict[int, Any] = {}


def handler(broker: RunningBroker, rpc: str) -> Any:
    """The handler of `rpc` from one method table per broker, as the server builds it once."""
    context = broker.server.broker
    table = _TABLES.get(id(context))
    if table is None or table[0] is not context:
        table = _TABLES[id(context)] = (context, methods(context, ENDPOINT))
    return table[1][path(rpc)].handler


def producer_settings(*topics: str) -> Any:
    publishing = definition.Publishing(
        topics=[definition.Resource(name=t) for t in topics], max_body_size=1 << 27
    )
    settings = definition.Settings(
        client_type=definition.ClientType.Value("PRODUCER"), publishing=publishing
    )
    return service.TelemetryCommand(settings=settings)


class Stream:
    """A Telemetry call driven by hand: what the client sends, what the server answered."""

    def __init__(self) -> None:
        self.to_server, self._requests = trio.open_memory_channel[Any](8)
        self.answers: list[Any] = []
        self.answered = trio.Event()

    async def requests(self) -> AsyncIterator[Any]:
        async with self._requests:
            async for request in self._requests:
                yield request

    async def send(self, answer: Any) -> None:
        self.answers.append(answer)
        self.answered.set()

    async def wait_for(self, found: Callable[[Any], bool]) -> Any:
        with trio.fail_after(20):
            while True:
                for answer in self.answers:
                    if found(answer):
                        return answer
                self.answered = trio.Event()
                await self.answered.wait()


async def test_telemetry_answers_settings_and_tracks_the_producer(
    broker: RunningBroker, nursery: trio.Nursery
) -> None:
    stream = Stream()
    nursery.start_soon(handler(broker, "Telemetry"), stream.requests(), stream.send, CONTEXT)
    await stream.to_server.send(producer_settings("GrpcSettings"))
    answer = await stream.wait_for(lambda a: a.HasField("settings"))
    assert answer.status.code == code("OK")
    assert answer.settings.publishing.max_body_size == broker.config.store.max_message_size
    assert answer.settings.backoff_policy.max_attempts > 0
    producers = broker.server.broker.producers
    channels = producers.channels("GrpcSettings")
    assert [c.client_id for c in channels] == ["client-1"]
    await stream.to_server.aclose()  # the client half-closes: the session ends
    with trio.fail_after(10):
        while producers.channels("GrpcSettings"):  # noqa: ASYNC110 - the table has no event
            await trio.sleep(0.01)


async def test_telemetry_consumer_settings_carry_the_group_retry_policy(
    broker: RunningBroker, nursery: trio.Nursery
) -> None:
    stream = Stream()
    nursery.start_soon(handler(broker, "Telemetry"), stream.requests(), stream.send, CONTEXT)
    subscription = definition.Subscription(group=definition.Resource(name="GrpcGroup"))
    settings = definition.Settings(
        client_type=definition.ClientType.Value("SIMPLE_CONSUMER"), subscription=subscription
    )
    await stream.to_server.send(service.TelemetryCommand(settings=settings))
    answer = await stream.wait_for(lambda a: a.HasField("settings"))
    assert answer.settings.subscription.receive_batch_size > 0
    assert answer.settings.subscription.long_polling_timeout.seconds > 0
    assert answer.settings.backoff_policy.max_attempts == 17  # 16 retries, 4.9's default
    backoff = answer.settings.backoff_policy.customized_backoff.next
    assert backoff[0].seconds == 10  # the first retry waits delay level 3
    assert answer.settings.subscription.fifo is False
    await stream.to_server.aclose()


async def test_an_orderly_group_is_told_to_consume_fifo(
    broker: RunningBroker, nursery: trio.Nursery
) -> None:
    """The PushConsumer consumes a message group in order only when the settings say fifo."""
    broker.server.broker.groups.put(
        SubscriptionGroupConfig("GrpcOrderly", consume_message_orderly=True)
    )
    stream = Stream()
    nursery.start_soon(handler(broker, "Telemetry"), stream.requests(), stream.send, CONTEXT)
    subscription = definition.Subscription(group=definition.Resource(name="GrpcOrderly"))
    settings = definition.Settings(
        client_type=definition.ClientType.Value("PUSH_CONSUMER"), subscription=subscription
    )
    await stream.to_server.send(service.TelemetryCommand(settings=settings))
    answer = await stream.wait_for(lambda a: a.HasField("settings"))
    assert answer.settings.subscription.fifo is True
    await stream.to_server.aclose()


async def test_telemetry_without_a_client_id_is_refused(broker: RunningBroker) -> None:
    stream = Stream()
    await stream.to_server.send(producer_settings("GrpcSettings"))
    await handler(broker, "Telemetry")(stream.requests(), stream.send, CallContext(9, "x:1"))
    assert [a.status.code for a in stream.answers] == [code("CLIENT_ID_REQUIRED")]


async def end(broker: RunningBroker, entry: Any, topic: str, resolution: str) -> Any:
    request = service.EndTransactionRequest(
        topic=definition.Resource(name=topic),
        message_id=entry.message_id,
        transaction_id=entry.transaction_id,
        resolution=definition.TransactionResolution.Value(resolution),
        source=definition.TransactionSource.Value("SOURCE_CLIENT"),
    )
    return await handler(broker, "EndTransaction")(request, CONTEXT)


def half(topic: str, body: bytes) -> Any:
    return message(topic, body, message_type=definition.MessageType.Value("TRANSACTION"))


async def test_end_transaction_commits_and_rolls_back(broker: RunningBroker) -> None:
    topic = "GrpcTx"
    committed = (await send(broker, half(topic, b"commit"))).entries[0]
    rolled = (await send(broker, half(topic, b"rollback"))).entries[0]
    assert len(committed.transaction_id) == 32
    assert (await end(broker, committed, topic, "COMMIT")).status.code == code("OK")
    assert (await end(broker, rolled, topic, "ROLLBACK")).status.code == code("OK")
    records = await pull_all(broker.port, topic, 1)
    assert [r.body for r in records] == [b"commit"]
    bad = service.SendResultEntry(message_id="x", transaction_id="not-an-id")
    assert (await end(broker, bad, topic, "COMMIT")).status.code == code("INVALID_TRANSACTION_ID")
    other = await end(broker, rolled, "AnotherTopic", "COMMIT")  # the producer group is the topic
    assert other.status.code == code("INTERNAL_SERVER_ERROR")
    assert "group" in other.status.message
    unset = await end(broker, rolled, topic, "TRANSACTION_RESOLUTION_UNSPECIFIED")
    assert unset.status.code == code("BAD_REQUEST")


async def test_the_check_of_an_open_half_goes_down_telemetry(
    broker: RunningBroker, nursery: trio.Nursery
) -> None:
    topic = "GrpcTxCheck"
    stream = Stream()
    context = CallContext(5, "127.0.0.1:40005", {CLIENT_ID_KEY: "tx-client"})
    nursery.start_soon(handler(broker, "Telemetry"), stream.requests(), stream.send, context)
    await stream.to_server.send(producer_settings(topic))
    await stream.wait_for(lambda a: a.HasField("settings"))
    sent = half(topic, b"open")
    sent.system_properties.tag = "TagT"
    entry = (await send(broker, sent)).entries[0]
    transactions = broker.server.broker.transactions
    assert transactions is not None
    future = int(time.time() * 1000) + 3_600_000
    with trio.fail_after(20):
        while not await transactions.scan(check=True, now_ms=future):  # noqa: ASYNC110
            await trio.sleep(0.05)  # until the half is dispatched
    command = await stream.wait_for(lambda a: a.HasField("recover_orphaned_transaction_command"))
    recover = command.recover_orphaned_transaction_command
    assert recover.message.topic.name == topic
    assert recover.message.body == b"open"
    assert recover.message.system_properties.message_id == entry.message_id
    assert recover.message.system_properties.tag == "TagT"
    kind = recover.message.system_properties.message_type
    assert definition.MessageType.Name(kind) == "TRANSACTION"
    assert not recover.message.system_properties.HasField("invisible_duration")  # not received
    assert dict(recover.message.user_properties) == {}  # the half's own properties stay inside
    # the Node.js client decodes no message without a digest (its check never ran)
    digest = recover.message.system_properties.body_digest
    assert digest.type == definition.DigestType.Value("MD5")
    assert digest.checksum == hashlib.md5(b"open").hexdigest().upper()
    assert recover.transaction_id != entry.transaction_id  # the check's copy of the half
    checked = service.SendResultEntry(
        message_id=entry.message_id, transaction_id=recover.transaction_id
    )
    assert (await end(broker, checked, topic, "COMMIT")).status.code == code("OK")
    assert [r.body for r in await pull_all(broker.port, topic, 1)] == [b"open"]
    await stream.to_server.aclose()


async def test_a_heartbeat_without_a_stream_keeps_nothing(broker: RunningBroker) -> None:
    sessions = SessionService(broker.server.broker)
    for conn_id in range(50):
        context = CallContext(100 + conn_id, "127.0.0.1:1", {CLIENT_ID_KEY: f"c{conn_id}"})
        answer = await sessions.heartbeat(service.HeartbeatRequest(), context)
        assert answer.status.code == code("OK")
    assert sessions.sessions == {}  # no stream to end them: they would never go


async def test_termination_ends_the_session_before_its_stream(
    broker: RunningBroker, nursery: trio.Nursery
) -> None:
    stream = Stream()
    nursery.start_soon(handler(broker, "Telemetry"), stream.requests(), stream.send, CONTEXT)
    await stream.to_server.send(producer_settings("GrpcBye"))
    await stream.wait_for(lambda a: a.HasField("settings"))
    producers = broker.server.broker.producers
    assert producers.channels("GrpcBye")
    bye = await handler(broker, "NotifyClientTermination")(
        service.NotifyClientTerminationRequest(), CONTEXT
    )
    assert bye.status.code == code("OK")
    assert not producers.channels("GrpcBye")
    await stream.to_server.aclose()


async def test_sessions_of_one_connection_are_bounded(broker: RunningBroker) -> None:
    sessions = SessionService(broker.server.broker)
    for n in range(MAX_SESSIONS_PER_CONNECTION):
        context = CallContext(7, "127.0.0.1:1", {CLIENT_ID_KEY: f"c{n}"})
        assert sessions._session(context) is not None
    stream = Stream()
    await stream.to_server.send(producer_settings("GrpcBound"))
    extra = CallContext(7, "127.0.0.1:1", {CLIENT_ID_KEY: "one-more"})
    await sessions.telemetry(stream.requests(), stream.send, extra)
    assert [a.status.code for a in stream.answers] == [code("TOO_MANY_REQUESTS")]
    assert len(sessions.sessions) == MAX_SESSIONS_PER_CONNECTION
