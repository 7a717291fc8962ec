"""With ACL on, RocketMQ 5 calls are checked against the remoting ACL's accounts: a signed call
of a known account with the permission passes; no signature, an unknown key, a wrong signature
or a stale secret is UNAUTHORIZED; a resource not granted is FORBIDDEN; a white-listed address
needs no signature. Driven in process against a real broker, and with the official client."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from broker.acl.permission import Permission
from broker.acl.validator import AccessValidator
from broker.grpc.acl import GrpcAccess, signature
from broker.grpc.methods import CallContext, path
from broker.grpc.service import methods
from protocol.v2 import load
from tests.conftest import RunningBroker, make_config, start_broker
from tests.grpc.test_produce_handlers import code, message

definition, service = load()
DATE = "20260101T120000Z"

ACL = """
globalWhiteRemoteAddresses: ["10.9.9.*"]
accounts:
  - accessKey: writer-key
    secretKey: writer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: ["Allowed=PUB|SUB", "ReadOnly=SUB"]
"""


def signed(ak: str, secret: str, peer: str = "127.0.0.1:4000") -> CallContext:
    authorization = (
        f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, "
        f"Signature={signature(secret, DATE)}"
    )
    metadata = {"authorization": authorization, "x-mq-date-time": DATE, "x-mq-client-id": "c"}
    return CallContext(1, peer, metadata)


@pytest.fixture
async def guarded(nursery: trio.Nursery, tmp_path: pathlib.Path) -> AsyncIterator[RunningBroker]:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    config = make_config(tmp_path / "store", acl_enable=True, acl_file=str(acl))
    running = await start_broker(nursery, config)
    yield running
    await running.stop()


async def call_send(broker: RunningBroker, topic: str, context: CallContext) -> Any:
    table = methods(broker.server.broker, ("127.0.0.1", 1))
    request = service.SendMessageRequest(messages=[message(topic)])
    handler: Any = table[path("SendMessage")].handler
    return await handler(request, context)


@pytest.mark.parametrize(
    ("topic", "context", "expected"),
    [
        ("Allowed", signed("writer-key", "writer-secret"), "OK"),
        ("ReadOnly", signed("writer-key", "writer-secret"), "FORBIDDEN"),
        ("Elsewhere", signed("writer-key", "writer-secret"), "FORBIDDEN"),
        ("Allowed", signed("writer-key", "wrong-secret"), "UNAUTHORIZED"),
        ("Allowed", signed("nobody-key", "writer-secret"), "UNAUTHORIZED"),
        ("Allowed", CallContext(1, "127.0.0.1:4000", {"x-mq-client-id": "c"}), "UNAUTHORIZED"),
        ("Elsewhere", CallContext(1, "10.9.9.4:4000"), "OK"),  # globally white-listed
    ],
)
async def test_sends_are_checked(
    guarded: RunningBroker, topic: str, context: CallContext, expected: str
) -> None:
    answer = await call_send(guarded, topic, context)
    assert answer.status.code == code(expected), answer.status.message


async def test_telemetry_refused_without_a_signature(guarded: RunningBroker) -> None:
    table = methods(guarded.server.broker, ("127.0.0.1", 1))
    answers: list[Any] = []

    async def requests() -> AsyncIterator[Any]:
        yield service.TelemetryCommand()

    async def send(answer: Any) -> None:
        answers.append(answer)

    context = CallContext(1, "127.0.0.1:4000", {"x-mq-client-id": "c"})
    handler: Any = table[path("Telemetry")].handler
    await handler(requests(), send, context)
    assert [a.status.code for a in answers] == [code("UNAUTHORIZED")]


def test_acl_off_checks_nothing(tmp_path: pathlib.Path) -> None:
    access = GrpcAccess(make_config(tmp_path / "store"))
    assert access.check(CallContext(1, "1.2.3.4:5"), "SendMessage", {"T": Permission.PUB}) is None


def test_a_rule_change_applies_to_grpc_calls(tmp_path: pathlib.Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    validator = AccessValidator(acl, reload_interval_s=0)
    access = GrpcAccess(make_config(tmp_path / "store"), validator)
    context = signed("writer-key", "writer-secret")
    assert access.check(context, "SendMessage", {"ReadOnly": Permission.SUB}) is None
    acl.write_text(ACL.replace("ReadOnly=SUB", "ReadOnly=DENY") + "\n")
    refused = access.check(context, "SendMessage", {"ReadOnly": Permission.SUB})
    assert refused is not None
    assert refused.code == code("FORBIDDEN")


async def test_consumer_calls_are_checked(guarded: RunningBroker) -> None:
    """Receiving, acking and the rest need SUB on the topic and on the group."""
    table = methods(guarded.server.broker, ("127.0.0.1", 1))
    group = definition.Resource(name="Readers")
    unsigned = CallContext(1, "127.0.0.1:4000", {"x-mq-client-id": "c"})
    writer = signed("writer-key", "writer-secret")
    queue = definition.MessageQueue(topic=definition.Resource(name="Elsewhere"), id=-1)
    receive = service.ReceiveMessageRequest(group=group, message_queue=queue, batch_size=1)
    handler: Any = table[path("ReceiveMessage")].handler
    for context, expected in ((unsigned, "UNAUTHORIZED"), (writer, "FORBIDDEN")):
        answers = [answer async for answer in handler(receive, context)]
        assert [a.status.code for a in answers] == [code(expected)]
    for rpc, request in (
        ("AckMessage", service.AckMessageRequest),
        ("ChangeInvisibleDuration", service.ChangeInvisibleDurationRequest),
        ("ForwardMessageToDeadLetterQueue", service.ForwardMessageToDeadLetterQueueRequest),
        ("QueryAssignment", service.QueryAssignmentRequest),
    ):
        unary: Any = table[path(rpc)].handler
        topic = definition.Resource(name="Elsewhere")
        answer = await unary(request(group=group, topic=topic), unsigned)
        assert answer.status.code == code("UNAUTHORIZED"), rpc
        answer = await unary(request(group=group, topic=topic), writer)
        assert answer.status.code == code("FORBIDDEN"), rpc
    # granted: the topic is readable and the group may subscribe (nothing there yet)
    allowed = definition.MessageQueue(topic=definition.Resource(name="Allowed"), id=-1)
    assignment: Any = table[path("QueryAssignment")].handler
    answer = await assignment(
        service.QueryAssignmentRequest(group=group, topic=allowed.topic), writer
    )
    assert answer.status.code != code("FORBIDDEN") and answer.status.code != code("UNAUTHORIZED")
