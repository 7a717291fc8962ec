"""CONSUMER_SEND_MSG_BACK and delayed delivery against a real broker over loopback: a retried
message comes back in the group's retry topic after its delay, with one more reconsume time and
its original topic recorded; past the retry limit (or with a negative level) it goes to the
dead-letter topic; delayed sends are delivered to their topic when due; a damaged offsets file
stops startup with one line."""

from __future__ import annotations

import pathlib

import pytest
import trio

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.consumer_headers import ConsumerSendMsgBackRequestHeader
from protocol.msgid import decode_offset_msg_id
from protocol.properties import decode_properties
from rmq_client.producer import Message, SendError, open_producer
from rmq_client.pull_consumer import PullConsumer, open_pull_consumer
from store.decode import CommitLogRecord
from tests.conftest import RunningBroker
from tests.daemon import serve_refused

GROUP = "retry-group"


async def send_one(port: int, message: Message) -> int:
    """Send `message`; its commit-log offset."""
    async with open_producer("127.0.0.1", port) as producer:
        result = await producer.send(message)
    return decode_offset_msg_id(result.offset_msg_id)[2]


async def send_back(
    consumer: PullConsumer, offset: int, delay_level: int, max_times: int | None = None
) -> RemotingCommand:
    header = ConsumerSendMsgBackRequestHeader(
        offset, GROUP, delay_level, origin_topic="Work", max_reconsume_times=max_times
    )
    command = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext_fields())
    return await consumer.connection.request(command)


async def pull_first(consumer: PullConsumer, topic: str, timeout_s: float) -> CommitLogRecord:
    """The first message of `topic` (any queue), waiting up to `timeout_s` for it."""
    with trio.fail_after(timeout_s):
        while True:
            for queue_id in range(4):
                try:
                    result = await consumer.pull(topic, queue_id, 0, expression="*")
                except SendError:
                    continue  # the topic has fewer queues
                if result.found:
                    return result.records[0]
            await trio.sleep(0.1)


async def test_a_message_sent_back_returns_in_the_retry_topic_after_its_delay(
    broker: RunningBroker,
) -> None:
    offset = await send_one(broker.port, Message("Work", b"try me", tags="T"))
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe("Work")
        started = trio.current_time()
        answer = await send_back(consumer, offset, delay_level=1)  # 1 s
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        retried = await pull_first(consumer, f"%RETRY%{GROUP}", timeout_s=8)
        assert trio.current_time() - started >= 0.9  # not before its delay
    assert retried.body == b"try me"
    assert retried.reconsume_times == 1
    props = decode_properties(retried.properties)
    assert props["RETRY_TOPIC"] == "Work" and props["TAGS"] == "T"
    assert "DELAY" not in props and props["ORIGIN_MESSAGE_ID"]


@pytest.mark.parametrize(("delay_level", "max_times"), [(-1, None), (3, 0)])
async def test_past_the_retry_limit_a_message_goes_to_the_dead_letter_topic(
    broker: RunningBroker, delay_level: int, max_times: int | None
) -> None:
    offset = await send_one(broker.port, Message("Work", b"hopeless"))
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe("Work")
        answer = await send_back(consumer, offset, delay_level, max_times)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        dead = await pull_first(consumer, f"%DLQ%{GROUP}", timeout_s=3)
    assert dead.body == b"hopeless" and dead.reconsume_times == 1


async def test_send_back_of_an_unknown_offset_is_refused(broker: RunningBroker) -> None:
    await send_one(broker.port, Message("Work", b"x"))
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe("Work")
        answer = await send_back(consumer, 10**9, delay_level=1)
    assert answer.code == ResponseCode.SYSTEM_ERROR and "look message by offset" in (
        answer.remark or ""
    )


async def test_a_delayed_send_is_delivered_to_its_topic_when_due(broker: RunningBroker) -> None:
    await send_one(broker.port, Message("Later", b"in a second", delay_level=1, queue_id=0))
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe("Later")
        result = await consumer.pull("Later", 0, 0, expression="*", suspend_ms=5000)
    [delivered] = result.records
    assert delivered.body == b"in a second"
    # Stored in its topic a second (level 1) after the client sent it, however long this test
    # took to get to its pull: the timestamps say when, not the test's own clock.
    assert delivered.store_timestamp - delivered.born_timestamp >= 1000


def test_a_damaged_offsets_file_stops_startup_with_one_line(tmp_path: pathlib.Path) -> None:
    config = tmp_path / "store" / "config"
    config.mkdir(parents=True)
    (config / "consumerOffset.json").write_text('{"offsetTable": [1, 2')
    refused = serve_refused(tmp_path / "store")
    assert refused.returncode != 0
    assert "Traceback" not in refused.stderr
    assert "consumerOffset.json" in refused.stderr.strip().splitlines()[-1]
