"""Connections and the requests the broker sends to clients, over real sockets: the consumer and
producer connection lists, a reset by time that the group's live client is told of and that
makes it re-read, and GET_CONSUMER_RUNNING_INFO relayed to a client and back (answered, slow,
gone)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from broker.admin import connections
from protocol.admin_group import (
    MessageQueue,
    ResetOffsetBody,
    ResetOffsetRequestHeader,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from rmq_client.admin_groups import (
    get_consumer_connections,
    get_consumer_running_info,
    get_producer_connections,
    reset_offset_by_time,
)
from rmq_client.producer import Message, Producer, SendError, open_producer
from rmq_client.pull_consumer import PullConsumer
from tests.conftest import RunningBroker
from tests.store.conftest import wait_until

TOPIC = "AdminReset"
GROUP = "reset_group"
CLIENT = "127.0.0.1@reset-client"


class LiveConsumer:
    """A pull consumer whose connection also takes the broker's requests."""

    def __init__(self, conn: Producer, consumer: PullConsumer) -> None:
        self.conn = conn
        self.consumer = consumer
        send, self.requests = trio.open_memory_channel[RemotingCommand](16)
        conn.broker_requests = send

    async def next_request(self) -> RemotingCommand:
        """The broker's next request but the group-changed notices (sent as members come)."""
        with trio.fail_after(5):
            while True:
                command = await self.requests.receive()
                if command.code != RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
                    return command


@asynccontextmanager
async def live_consumer(port: int, client_id: str = CLIENT) -> AsyncIterator[LiveConsumer]:
    async with open_producer("127.0.0.1", port) as conn:
        live = LiveConsumer(conn, PullConsumer(conn, GROUP, client_id))
        await live.consumer.subscribe(TOPIC)
        yield live


async def send_two_batches(producer: Producer, broker: RunningBroker) -> int:
    """Three messages to each of 2 queues, then three more; the store time between them."""
    for index in range(3):
        for queue_id in range(2):
            await producer.send(Message(TOPIC, f"old-{index}".encode(), queue_id=queue_id))
    await trio.sleep(0.01)  # the batches' store times differ
    between = broker.server.broker.store.now_ms()
    await trio.sleep(0.01)
    for index in range(3):
        for queue_id in range(2):
            await producer.send(Message(TOPIC, f"new-{index}".encode(), queue_id=queue_id))
    return between


async def test_connection_lists_name_each_client(broker: RunningBroker, producer: Producer) -> None:
    await producer.send(Message(TOPIC, b"x"))
    await producer.heartbeat("127.0.0.1@producer-1")
    async with live_consumer(broker.port) as live:
        listed = await get_consumer_connections(producer, GROUP)
        (conn,) = listed.connections
        local_port = live.conn.stream.socket.getsockname()[1]  # type: ignore[attr-defined]
        assert (conn.client_id, conn.client_addr) == (CLIENT, f"127.0.0.1:{local_port}")
        assert (conn.language, conn.version) == ("JAVA", 407)
        assert list(listed.subscriptions) == [TOPIC]
        assert listed.subscriptions[TOPIC].sub_string == "*"
        assert (listed.consume_type, listed.message_model, listed.consume_from_where) == (
            "CONSUME_ACTIVELY",
            "CLUSTERING",
            "CONSUME_FROM_FIRST_OFFSET",
        )
    await wait_until(lambda: broker.server.broker.consumers.group_info(GROUP) is None)
    with pytest.raises(SendError) as offline:
        await get_consumer_connections(producer, GROUP)
    assert offline.value.code == ResponseCode.CONSUMER_NOT_ONLINE
    assert offline.value.remark == f"the consumer group[{GROUP}] not online"

    (producer_conn,) = (await get_producer_connections(producer, producer.group)).connections
    assert producer_conn.client_id == "127.0.0.1@producer-1"
    with pytest.raises(SendError) as unknown:
        await get_producer_connections(producer, "no_such_producers")
    assert unknown.value.code == ResponseCode.SYSTEM_ERROR
    assert unknown.value.remark == "the producer group[no_such_producers] not exist"


async def test_reset_by_time_tells_the_client_and_the_group_rereads(
    broker: RunningBroker, producer: Producer
) -> None:
    between = await send_two_batches(producer, broker)
    async with live_consumer(broker.port) as live:
        consumer = live.consumer
        for queue_id in range(2):  # consumed everything
            await wait_until(lambda: broker.server.broker.consume is not None)
            result = await consumer.pull(TOPIC, queue_id, 0)
            assert len(result.records) == 6
            await consumer.commit(TOPIC, queue_id, 6)
        for queue_id in (2, 3):  # the topic's other (empty) queues
            await consumer.commit(TOPIC, queue_id, 0)
        name = broker.config.broker_name

        body = await reset_offset_by_time(producer, TOPIC, GROUP, between)
        expected = {MessageQueue(TOPIC, name, q): o for q, o in enumerate((3, 3, 0, 0))}
        assert body.offset_table == expected
        told = await live.next_request()
        assert told.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET and told.is_oneway
        header = ResetOffsetRequestHeader.from_ext_fields(told.ext_fields)
        assert (header.topic, header.group, header.timestamp) == (TOPIC, GROUP, between)
        assert ResetOffsetBody.decode(told.body).offset_table == expected
        # The broker's table moved too: the group re-reads the second batch from there
        for queue_id in range(2):
            offset = await consumer.committed(TOPIC, queue_id)
            assert offset == 3
            again = await consumer.pull(TOPIC, queue_id, offset)
            assert [r.body for r in again.records] == [f"new-{i}".encode() for i in range(3)]

        # Not forced: a time past the committed offset leaves it; forced, it moves forward
        await consumer.commit(TOPIC, 0, 1)
        kept = await reset_offset_by_time(producer, TOPIC, GROUP, between, force=False)
        assert kept.offset_table[MessageQueue(TOPIC, name, 0)] == 1
        to_end = await reset_offset_by_time(producer, TOPIC, GROUP, -1)
        assert [o for _, o in sorted(to_end.offset_table.items())] == [6, 6, 0, 0]
        assert await consumer.committed(TOPIC, 0) == 6


async def test_reset_refusals(broker: RunningBroker, producer: Producer) -> None:
    await producer.send(Message(TOPIC, b"x", queue_id=0))
    cases = [
        ("NoSuchTopic", GROUP, ResponseCode.SYSTEM_ERROR, "no topic in this broker"),
        (TOPIC, "never_committed", ResponseCode.SYSTEM_ERROR, "not exist"),
    ]
    async with live_consumer(broker.port) as live:
        for queue_id in range(4):
            await live.consumer.commit(TOPIC, queue_id, 0)
        for topic, group, code, remark in cases:
            with pytest.raises(SendError) as refused:
                await reset_offset_by_time(producer, topic, group, 0)
            assert refused.value.code == code and remark in (refused.value.remark or "")
    await wait_until(lambda: broker.server.broker.consumers.group_info(GROUP) is None)
    with pytest.raises(SendError) as offline:
        await reset_offset_by_time(producer, TOPIC, GROUP, 0)
    assert offline.value.code == ResponseCode.CONSUMER_NOT_ONLINE
    with pytest.raises(SendError) as missing:
        fields = {"topic": TOPIC, "group": GROUP}
        await producer_call(producer, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields)
    assert "the custom field timestamp is null" in (missing.value.remark or "")


async def producer_call(producer: Producer, code: int, fields: dict[str, str]) -> None:
    response = await producer.request(RemotingCommand.request(code, fields))
    if response.code != ResponseCode.SUCCESS:
        raise SendError(response.code, response.remark)


async def test_running_info_is_relayed_to_the_client_and_back(
    broker: RunningBroker, producer: Producer
) -> None:
    async with live_consumer(broker.port) as live, trio.open_nursery() as nursery:

        async def answer() -> None:
            asked = await live.next_request()
            assert asked.code == RequestCode.GET_CONSUMER_RUNNING_INFO
            assert asked.ext_fields["clientId"] == CLIENT
            assert asked.ext_fields["jstackEnable"] == "true"
            reply = asked.make_response(
                ResponseCode.SUCCESS,
                body=b'{"properties":{"PROP_CONSUME_TYPE":"CONSUME_ACTIVELY"},"jstack":"x"}',
            )
            await live.conn.reply(reply)

        nursery.start_soon(answer)
        info = await get_consumer_running_info(producer, GROUP, CLIENT, jstack=True)
        assert info == {"properties": {"PROP_CONSUME_TYPE": "CONSUME_ACTIVELY"}, "jstack": "x"}

    with pytest.raises(SendError) as gone:
        await get_consumer_running_info(producer, GROUP, CLIENT)
    assert gone.value.code == ResponseCode.SYSTEM_ERROR
    assert gone.value.remark == f"The Consumer <{GROUP}> <{CLIENT}> not online"


async def test_a_silent_client_times_out_and_a_closing_one_fails_the_call(
    broker: RunningBroker, producer: Producer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "CALL_CLIENT_TIMEOUT_S", 0.3)
    async with live_consumer(broker.port) as live:
        with pytest.raises(SendError) as slow:
            await get_consumer_running_info(producer, GROUP, CLIENT)
        assert slow.value.code == ResponseCode.CONSUME_MSG_TIMEOUT
        assert "no answer within 0.3 s" in (slow.value.remark or "")
        assert (await live.next_request()).code == RequestCode.GET_CONSUMER_RUNNING_INFO

    monkeypatch.setattr(connections, "CALL_CLIENT_TIMEOUT_S", 30.0)
    async with open_producer("127.0.0.1", broker.port) as admin, trio.open_nursery() as nursery:
        failed: list[SendError] = []
        answered = trio.Event()

        async def ask() -> None:
            with pytest.raises(SendError) as closed:
                await get_consumer_running_info(admin, GROUP, CLIENT)
            failed.append(closed.value)
            answered.set()

        async with live_consumer(broker.port) as live:
            nursery.start_soon(ask)
            await live.next_request()  # asked; the client leaves without answering
        with trio.fail_after(5):
            await answered.wait()
    assert failed[0].code == ResponseCode.SYSTEM_ERROR
    assert "closed before it answered" in (failed[0].remark or "")
