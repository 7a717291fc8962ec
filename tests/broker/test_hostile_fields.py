"""Hostile field values replayed as raw frames against a real broker on loopback (issue #26).

Each case sends what a wire fuzzer found poisoning shared state (a group name that is a number,
a client id that is a float, a subscription expression that is a boolean, a header language
that is a huge integer, a good send followed by a bad length prefix in the same write, a pull
or send back naming a group no client could name), then checks that the requests a well-behaved
client makes next still succeed: a heartbeat of another group, a pull,
GET_CONSUMER_LIST_BY_GROUP and a send.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import trio

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder, encode_frame
from protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    PullMessageRequestHeader,
    SendMessageRequestHeaderV2,
)
from rmq_client.producer import Message, SendStatus, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from tests.conftest import RunningBroker

TOPIC = "HostileT"
DEADLINE_S = 20


def json_frame(header: dict[str, Any], body: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return struct.pack(">ii", 4 + len(text) + len(body), len(text)) + text + body


def heartbeat_frame(body: dict[str, Any], opaque: int = 1) -> bytes:
    header = {"code": RequestCode.HEART_BEAT, "opaque": opaque, "flag": 0, "extFields": {}}
    return json_frame(header, json.dumps(body).encode())


def consumer_body(client_id: Any, group: Any, sub_string: Any = "*") -> dict[str, Any]:
    subscription = {"topic": TOPIC, "subString": sub_string, "subVersion": 1}
    consumer = {"groupName": group, "subscriptionDataSet": [subscription]}
    return {"clientID": client_id, "consumerDataSet": [consumer]}


def send_frame(opaque: int, body: bytes, topic: str = TOPIC) -> bytes:
    header = SendMessageRequestHeaderV2("pg", topic, "TBW102", 4, 0, 0, 1_700_000_000_000, 0)
    command = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, header.to_ext_fields(), body, opaque=opaque
    )
    return encode_frame(command)


async def exchange(
    port: int, payload: bytes, count: int = 1, *, then_closed: bool = False
) -> list[RemotingCommand]:
    """Write `payload` in one `send_all` and read `count` answers; with `then_closed`, also
    check that the broker closes the connection after them."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    decoder = FrameDecoder()
    answers: list[RemotingCommand] = []
    async with stream:
        await stream.send_all(payload)
        with trio.fail_after(DEADLINE_S):
            while len(answers) < count:
                data = await stream.receive_some(65536)
                assert data, f"closed after {len(answers)} of {count} answers"
                answers.extend(decoder.feed(bytes(data)))
            if then_closed:
                assert await stream.receive_some(65536) == b""
    assert len(answers) == count
    return answers


async def still_served(port: int, group: str = "healthy-group") -> None:
    """A heartbeat of another group, a pull, the group's client list and a send succeed."""
    with trio.fail_after(DEADLINE_S):
        async with open_producer("127.0.0.1", port) as producer:
            sent = await producer.send(Message(TOPIC, b"after", queue_id=0))
            assert sent.status is SendStatus.SEND_OK
        async with open_pull_consumer(
            "127.0.0.1", port, group, client_id="10.0.0.1@healthy"
        ) as consumer:
            await consumer.subscribe(TOPIC)  # HEART_BEAT of a new group
            assert await consumer.consumer_ids() == ["10.0.0.1@healthy"]
            result = await consumer.pull(TOPIC, 0, 0)  # the group's subscription applies
            assert result.found, result
            assert b"after" in [r.body for r in result.records]


async def heartbeat_answer(port: int, body: dict[str, Any]) -> RemotingCommand:
    (answer,) = await exchange(port, heartbeat_frame(body))
    return answer


async def test_a_group_name_that_is_a_number_is_refused_and_groups_are_still_created(
    broker: RunningBroker,
) -> None:
    answer = await heartbeat_answer(broker.port, consumer_body("10.0.0.2@evil", 12345))
    await still_served(broker.port)  # creates a group
    # a later pull and heartbeat of yet another group create it
    async with open_pull_consumer("127.0.0.1", broker.port, "third-group") as consumer:
        await consumer.subscribe(TOPIC)
        assert (await consumer.pull(TOPIC, 0, 0)).found
    assert broker.server.broker.groups.find("third-group") is not None
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark is not None and "groupName" in answer.remark
    assert broker.server.broker.groups.find("12345") is None


async def test_a_client_id_that_is_a_float_is_refused_and_the_group_lists_its_clients(
    broker: RunningBroker,
) -> None:
    answer = await heartbeat_answer(broker.port, consumer_body(1.5, "healthy-group"))
    await still_served(broker.port, "healthy-group")  # lists the group's clients
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark is not None and "clientID" in answer.remark


async def test_a_boolean_subscription_expression_is_refused_and_pulls_still_work(
    broker: RunningBroker,
) -> None:
    async with open_pull_consumer(
        "127.0.0.1", broker.port, "shared-group", client_id="10.0.0.1@good"
    ) as consumer:
        await consumer.subscribe(TOPIC)
        body = consumer_body("10.0.0.3@evil", "shared-group", sub_string=True)
        answer = await heartbeat_answer(broker.port, body)
        async with open_producer("127.0.0.1", broker.port) as producer:
            await producer.send(Message(TOPIC, b"kept", queue_id=0))
        with trio.fail_after(DEADLINE_S):
            result = await consumer.pull(TOPIC, 0, 0)  # by the group's subscription
        assert [r.body for r in result.records] == [b"kept"]
    await still_served(broker.port)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark is not None and "subString" in answer.remark


async def test_group_names_no_client_could_send_create_nothing(broker: RunningBroker) -> None:
    pull = PullMessageRequestHeader("bad group!", TOPIC, 0, 0, 32, 0, 0, 0, 0, "*", "TAG")
    back = ConsumerSendMsgBackRequestHeader(0, "g" * 300, 0)
    frames = [
        RemotingCommand.request(RequestCode.PULL_MESSAGE, pull.to_ext_fields(), opaque=1),
        RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, back.to_ext_fields(), opaque=2),
    ]
    answers = await exchange(broker.port, b"".join(encode_frame(f) for f in frames), 2)
    by_opaque = {a.opaque: a for a in answers}
    assert by_opaque[1].code == by_opaque[2].code == ResponseCode.SYSTEM_ERROR
    assert "consumerGroup: the specified group[bad group!] contains illegal characters" in str(
        by_opaque[1].remark
    )
    assert "group: the specified group is longer than group max length 255" in str(
        by_opaque[2].remark
    )
    groups = broker.server.broker.groups
    assert groups.find("bad group!") is None and groups.find("g" * 300) is None
    await still_served(broker.port)


async def test_a_huge_language_is_answered_and_the_connection_kept(broker: RunningBroker) -> None:
    bad = json_frame({"code": RequestCode.HEART_BEAT, "opaque": 41, "language": 10**30})
    good = heartbeat_frame({"clientID": "10.0.0.4@ok"}, opaque=42)
    answers = await exchange(broker.port, bad + good, 2)
    assert [(a.opaque, a.code) for a in answers] == [
        (41, ResponseCode.SYSTEM_ERROR),
        (42, ResponseCode.SUCCESS),
    ]
    assert answers[0].remark is not None and "language" in answers[0].remark
    await still_served(broker.port)


async def test_sends_before_a_bad_length_prefix_are_stored_and_answered(
    broker: RunningBroker,
) -> None:
    payload = send_frame(1, b"first") + send_frame(2, b"second") + struct.pack(">i", -1)
    answers = await exchange(broker.port, payload, 2, then_closed=True)
    assert sorted((a.opaque, a.code) for a in answers) == [
        (1, ResponseCode.SUCCESS),
        (2, ResponseCode.SUCCESS),
    ]
    async with open_pull_consumer("127.0.0.1", broker.port, "reader-group") as consumer:
        result = await consumer.pull(TOPIC, 0, 0, expression="*")
    assert sorted(r.body or b"" for r in result.records) == [b"first", b"second"]
    await still_served(broker.port)
