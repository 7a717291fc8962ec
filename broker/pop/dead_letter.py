"""A popped message sent to its group's dead letter queue at the consumer's word.

RocketMQ 5's push consumers decide themselves when a message failed too often
(ForwardMessageToDeadLetterQueue): the message its receipt handle names is stored again in
`%DLQ%<group>` (created with its one queue if unknown), with one more reconsume time, and then
acknowledged, so it is never revived. A receipt handle with nothing in flight under it (acked,
or revived already) is refused with NO_MESSAGE, as a change of invisible time is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from broker.pop.checks import parse_receipt, refuse
from broker.responses import STORED
from broker.rewrites import dead_letter_topic, stored_again
from protocol.codes import ResponseCode
from protocol.properties import MessageConst, decode_properties
from store.decode import decode_copied_records

if TYPE_CHECKING:
    from broker.pop.service import PopService

log = structlog.get_logger()


async def forward_to_dead_letter(service: PopService, group: str, topic: str, extra: str) -> str:
    """Store the message `extra` names in the group's DLQ and acknowledge it; the DLQ's name."""
    broker = service.broker
    consume = broker.consume
    assert consume is not None
    receipt = parse_receipt(extra)
    real = receipt.real_topic(topic, group)
    service.check_topic(topic, -1)
    key = (group, real, receipt.queue_id, receipt.ck_offset, receipt.pop_time)
    ck = service.inflight.get(key)
    if ck is None or receipt.queue_offset not in ck.unacked():
        raise refuse(
            ResponseCode.NO_MESSAGE,
            f"no message in flight for this receipt handle (offset {receipt.queue_offset}): "
            "acknowledged or visible again",
            "extraInfo",
        )
    found = consume.get_message(real, receipt.queue_id, receipt.queue_offset, 1)
    records = [r for data in found.messages for r in decode_copied_records(data)]
    if not records or records[0].queue_offset != receipt.queue_offset:
        raise refuse(
            ResponseCode.NO_MESSAGE,
            f"message {receipt.queue_offset} of {real} queue {receipt.queue_id} is gone",
            "extraInfo",
        )
    record = records[0]
    props = decode_properties(record.properties)
    props.pop(MessageConst.DELAY_TIME_LEVEL, None)
    props.setdefault(MessageConst.RETRY_TOPIC, topic)
    target, created = dead_letter_topic(broker.topics, group)
    if created:
        await broker.topics.persist()
    message = stored_again(
        record,
        props,
        target.topic_name,
        0,
        store_host=broker.store_host,
        reconsume_times=record.reconsume_times + 1,
    )
    result = await broker.store.put_message(message)
    if result.status not in STORED:
        raise refuse(
            ResponseCode.SYSTEM_ERROR, f"the dead letter queue refused the message: {result.status}"
        )
    await service.ack(group, topic, receipt.queue_id, receipt.queue_offset, extra)
    log.info(
        "pop_message_dead_lettered",
        group=group,
        topic=real,
        queue=receipt.queue_id,
        offset=receipt.queue_offset,
        by="consumer",
    )
    return target.topic_name
