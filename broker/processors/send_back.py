"""CONSUMER_SEND_MSG_BACK (36): a message the consumer failed to process goes back for a retry.

RocketMQ 4.9's `consumerSendMsgBack`: the original record is looked up by its commit-log offset
and stored again in `%RETRY%<group>` with one more reconsume time, delayed by the request's
level (0 means 3 + reconsume times, as upstream), so the schedule service hands it back to the
group's consumers later. Once its reconsume times reach the group's `retryMaxTimes` (or the
client's `maxReconsumeTimes`), or when the level is negative, it goes to `%DLQ%<group>` instead
and is not delivered again. The first retry records the message's original topic
(RETRY_TOPIC) and id (ORIGIN_MESSAGE_ID).

Unlike upstream, what cannot work is refused before anything is stored: an offset that does not
start a record in the log (`store.lookup`: no read past its header, large reads off the event
loop), and a group whose `%RETRY%` or `%DLQ%` topic would break the topic rule (a group over 120
characters), configured or not, whose retry the schedule could never deliver.
"""

from __future__ import annotations

import random

from broker.processors import RequestContext
from broker.responses import send_back_response
from broker.rewrites import (
    dead_letter_topic,
    drop_delay,
    past_retry_limit,
    send_back_topic,
    stored_again,
    to_schedule,
)
from broker.topic_config import (
    DLQ_NUMS_PER_GROUP,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    check_group_topics,
)
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.consumer_headers import ConsumerSendMsgBackRequestHeader
from protocol.errors import HeaderFieldError
from protocol.properties import MessageConst, decode_properties
from store.decode import CommitLogRecord
from store.message import MessageExtBrokerInner, encode_host, offset_msg_id


def _reject(code: int, remark: str) -> HeaderFieldError:
    return HeaderFieldError("group", remark, code)


class ConsumerSendMsgBackProcessor:
    def __init__(self) -> None:
        self._rng = random.Random()

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = ConsumerSendMsgBackRequestHeader.from_ext_fields(request.ext_fields)
        broker = ctx.broker
        check_group_topics(header.group)  # a configured group too: no retry could be stored
        group = await broker.groups.find_or_create(header.group)
        if group is None:
            raise _reject(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group not exist, {header.group}",
            )
        if not broker.config.broker_permission & PERM_WRITE:
            raise _reject(
                ResponseCode.NO_PERMISSION,
                f"the broker[{broker.config.store_host_ip}] sending message is forbidden",
            )
        if group.retry_queue_nums <= 0:
            return request.make_response(ResponseCode.SUCCESS)  # the group keeps no retries
        original = None
        if broker.consume is not None:
            original = await broker.consume.look_message_by_offset(
                header.offset, broker.config.store.max_message_size
            )
        if original is None or original.body is None:
            raise _reject(
                ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {header.offset}"
            )
        dead = header.delay_level < 0 or past_retry_limit(
            original.reconsume_times,
            group.retry_max_times,
            request.version,
            header.max_reconsume_times,
        )
        if dead:
            topic, created = dead_letter_topic(broker.topics, header.group)
        else:
            topic, created = send_back_topic(
                broker.topics, RETRY_GROUP_TOPIC_PREFIX + header.group, group.retry_queue_nums
            )
        if created:
            await broker.topics.persist()
        if not topic.perm & PERM_WRITE:
            raise _reject(
                ResponseCode.NO_PERMISSION,
                f"the topic[{topic.topic_name}] sending message is forbidden",
            )
        delay = 0 if dead else header.delay_level or 3 + original.reconsume_times
        queue_id = self._rng.randrange(DLQ_NUMS_PER_GROUP if dead else group.retry_queue_nums)
        message = _retry_message(original, topic.topic_name, queue_id, delay, ctx)
        result = await broker.store.put_message(message)
        code, remark = send_back_response(result.status)
        return request.make_response(code, remark)


def _retry_message(
    original: CommitLogRecord, topic: str, queue_id: int, delay: int, ctx: RequestContext
) -> MessageExtBrokerInner:
    props = decode_properties(original.properties)
    props.setdefault(MessageConst.RETRY_TOPIC, original.topic)
    store_host = ctx.broker.store_host
    if MessageConst.ORIGIN_MESSAGE_ID not in props:
        host = encode_host(original.store_host)[0]
        props[MessageConst.ORIGIN_MESSAGE_ID] = offset_msg_id(host, original.physical_offset)
    drop_delay(props)  # the request's level applies, not the stored message's
    if delay > 0:
        topic, queue_id = to_schedule(props, topic, queue_id, delay, ctx.broker.delay_levels_ms)
    return stored_again(
        original,
        props,
        topic,
        queue_id,
        store_host=store_host,
        reconsume_times=original.reconsume_times + 1,
    )
