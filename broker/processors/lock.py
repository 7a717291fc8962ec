"""LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42): the queue locks of orderly consumers.

A lock is answered with the queues the caller holds now (`lockOKMQSet`), as 4.9's
AdminBrokerProcessor does; an unlock with SUCCESS. Only the queues of this broker that exist
(a known topic, a queue id below its read queues) and of a known group are locked: others are
simply not in the answer, so the lock table is bounded by the topic and group tables.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.processors import RequestContext
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.lock_body import LockBatchBody, MessageQueue, encode_locked


def _lockable(
    broker: BrokerContext, group: str, queues: tuple[MessageQueue, ...]
) -> list[MessageQueue]:
    if broker.groups.find(group) is None:
        return []
    name = broker.config.broker_name
    result = []
    for mq in queues:
        topic = broker.topics.find(mq.topic)
        if (
            mq.broker_name == name
            and topic is not None
            and 0 <= mq.queue_id < topic.read_queue_nums
        ):
            result.append(mq)
    return result


class LockBatchMqProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        body = LockBatchBody.from_json(request.body or b"", "lock batch")
        broker = ctx.broker
        wanted = _lockable(broker, body.consumer_group, body.mq_set)
        held = broker.locks.try_lock_batch(body.consumer_group, wanted, body.client_id)
        return request.make_response(ResponseCode.SUCCESS, body=encode_locked(held))


class UnlockBatchMqProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        body = LockBatchBody.from_json(request.body or b"", "unlock batch")
        ctx.broker.locks.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        return request.make_response(ResponseCode.SUCCESS)
