"""A delayed message its real topic can never take does not block its delay level (issue #26,
finding 5), against a real broker on loopback.

The poisoned records are put in SCHEDULE_TOPIC_XXXX directly, as a broker without the checks
at the door stored them (a send back of a group whose retry topic is over 127 characters): a
retry whose dead-letter topic fits goes there, one whose dead-letter topic does not fit either
is dropped with one warning; in both cases a DELAY=1 message sent after it is delivered. A
refusal that passes (the store busy) is still tried again, not dropped.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import pytest
import trio
from structlog.testing import capture_logs

from broker.topic_config import SCHEDULE_TOPIC
from protocol.properties import MessageConst, decode_properties, encode_properties
from rmq_client.producer import Message, open_producer
from rmq_client.pull_consumer import PullConsumer, PullResult, open_pull_consumer
from store.message import MessageExtBrokerInner, PutMessageResult
from store.status import PutMessageStatus
from tests.conftest import RunningBroker

DEADLINE_S = 10
#: the retry topic of a 121-character group has 128: one too many; its DLQ topic has 126
DLQ_FITS = "g" * 121
#: neither `%RETRY%` nor `%DLQ%` of a 130-character group fits
NOTHING_FITS = "h" * 130


async def put_delayed_retry(broker: RunningBroker, group: str, body: bytes) -> None:
    """A level-1 retry of `group` in the schedule topic, as an older broker stored it."""
    props = {
        MessageConst.RETRY_TOPIC: "Work",
        MessageConst.DELAY_TIME_LEVEL: "1",
        MessageConst.REAL_TOPIC: f"%RETRY%{group}",
        MessageConst.REAL_QUEUE_ID: "0",
    }
    message = MessageExtBrokerInner(
        topic=SCHEDULE_TOPIC,
        queue_id=0,
        body=body,
        properties_string=encode_properties(props),
        born_timestamp=int(time.time() * 1000),
        store_host=broker.server.broker.store_host,
        reconsume_times=1,
    )
    result = await broker.server.broker.store.put_message(message)
    assert result.status is PutMessageStatus.PUT_OK


async def delayed_send_is_delivered(broker: RunningBroker) -> None:
    async with open_producer("127.0.0.1", broker.port) as producer:
        await producer.send(Message("Later", b"on time", delay_level=1, queue_id=0))
    async with open_pull_consumer("127.0.0.1", broker.port, "later-group") as consumer:
        await consumer.subscribe("Later")
        [delivered] = (await pull(consumer, "Later")).records
    assert delivered.body == b"on time"


async def pull(consumer: PullConsumer, topic: str) -> PullResult:
    with trio.fail_after(DEADLINE_S):
        while True:
            result = await consumer.pull(topic, 0, 0, expression="*", suspend_ms=1000)
            if result.found:
                return result
            await trio.sleep(0.05)


async def test_a_retry_its_topic_cannot_take_goes_to_its_dead_letter_topic(
    broker: RunningBroker,
) -> None:
    with capture_logs() as logs:
        await put_delayed_retry(broker, DLQ_FITS, b"poison")
        await delayed_send_is_delivered(broker)
        async with open_pull_consumer("127.0.0.1", broker.port, "dlq-reader") as consumer:
            [dead] = (await pull(consumer, f"%DLQ%{DLQ_FITS}")).records
    assert dead.body == b"poison" and dead.reconsume_times == 1
    assert decode_properties(dead.properties)[MessageConst.RETRY_TOPIC] == "Work"
    assert [e["event"] for e in logs if e["event"].startswith("delayed_")] == [
        "delayed_message_dead_lettered"
    ]


async def test_a_retry_no_topic_can_take_is_dropped_with_one_warning(
    broker: RunningBroker,
) -> None:
    with capture_logs() as logs:
        await put_delayed_retry(broker, NOTHING_FITS, b"poison")
        await delayed_send_is_delivered(broker)
    events = [e for e in logs if e["event"].startswith("delayed_")]
    assert [e["event"] for e in events] == ["delayed_message_dropped"]
    assert events[0]["topic"] == f"%RETRY%{NOTHING_FITS}"
    assert "longer than topic max length" in str(events[0]["reason"])
    assert broker.server.broker.topics.find(f"%DLQ%{NOTHING_FITS}") is None


async def test_a_refusal_that_passes_is_tried_again(
    broker: RunningBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = broker.server.broker.store
    real_put: Callable[[MessageExtBrokerInner], Awaitable[PutMessageResult]] = store.put_message
    refusals = [PutMessageStatus.OS_PAGE_CACHE_BUSY] * 3

    async def busy_for_later(message: MessageExtBrokerInner) -> PutMessageResult:
        if message.topic == "Later" and refusals:
            return PutMessageResult(refusals.pop())
        return await real_put(message)

    monkeypatch.setattr(store, "put_message", busy_for_later)
    with capture_logs() as logs:
        await delayed_send_is_delivered(broker)
    assert refusals == []
    events = [e["event"] for e in logs if e["event"].startswith("delayed_")]
    assert events == ["delayed_delivery_failed"] * 3
