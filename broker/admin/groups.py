"""Consumer-group admin requests, answered as 4.9's `AdminBrokerProcessor` answers them.

UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) stores a group's settings (persisted);
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) lists them; DELETE_SUBSCRIPTIONGROUP (207) forgets a
group, and its committed offsets when `removeOffset` says so; GET_CONSUME_STATS (208) gives, per
queue of each topic the group consumes, the queue's end (broker offset), the group's committed
offset and the store time of the last message it consumed, with the group's consume rate;
GET_ALL_CONSUMER_OFFSET (43) the whole offset table; QUERY_TOPIC_CONSUME_BY_WHO (300) the
groups that consume a topic (live subscriptions and committed offsets).

Where we are stricter than 4.9: a group created by request must obey the name rule its retry
and dead-letter topics need, and its retry queue count and retry limit must lie in
[0, `MAX_RETRY_QUEUE_NUMS`] and [0, `MAX_RETRY_TIMES`] (4.9 stores whatever it is sent).
"""

from __future__ import annotations

from typing import Final

import structlog

from broker.admin import figures
from broker.processors import RequestContext
from broker.topic_config import check_group_topics
from protocol.admin_group import (
    ConsumerOffsetWrapper,
    ConsumeStats,
    DeleteSubscriptionGroupRequestHeader,
    GetConsumeStatsRequestHeader,
    GroupList,
    MessageQueue,
    OffsetWrapper,
    QueryTopicConsumeByWhoRequestHeader,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
)
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import HeaderFieldError

MAX_RETRY_QUEUE_NUMS: Final = 1024
MAX_RETRY_TIMES: Final = 1024

log = structlog.get_logger()


def _check_range(field: str, value: int, high: int) -> None:
    if not 0 <= value <= high:
        raise HeaderFieldError(
            field, f"subscription group body {field} {value} is out of range [0, {high}]"
        )


class UpdateSubscriptionGroupProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        config = SubscriptionGroupConfig.decode(request.body)
        check_group_topics(config.group_name)
        _check_range("retryQueueNums", config.retry_queue_nums, MAX_RETRY_QUEUE_NUMS)
        _check_range("retryMaxTimes", config.retry_max_times, MAX_RETRY_TIMES)
        groups = ctx.broker.groups
        created = groups.find(config.group_name) is None
        groups.put(config)
        await groups.persist()
        log.info(
            "subscription_group_updated",
            group=config.group_name,
            created=created,
            consume_enable=config.consume_enable,
            retry_queue_nums=config.retry_queue_nums,
            retry_max_times=config.retry_max_times,
            remote=ctx.remote_text,
        )
        return request.make_response(ResponseCode.SUCCESS)


class GetAllSubscriptionGroupProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        groups = ctx.broker.groups
        body = SubscriptionGroupWrapper(groups.table(), groups.data_version.to_json()).encode()
        return request.make_response(ResponseCode.SUCCESS, body=body)


class DeleteSubscriptionGroupProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = DeleteSubscriptionGroupRequestHeader.from_ext_fields(request.ext_fields)
        broker = ctx.broker
        deleted = broker.groups.delete(header.group_name)
        if deleted is not None:
            await broker.groups.persist()
        topics = 0
        if header.remove_offset:
            topics = broker.offsets.remove_group(header.group_name)
            await broker.offsets.persist()
        log.info(
            "subscription_group_deleted",
            group=header.group_name,
            known=deleted is not None,
            offsets_removed_topics=topics,
            remote=ctx.remote_text,
        )
        return request.make_response(ResponseCode.SUCCESS)


class GetConsumeStatsProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = GetConsumeStatsRequestHeader.from_ext_fields(request.ext_fields)
        return request.make_response(
            ResponseCode.SUCCESS, body=consume_stats(ctx, header.consumer_group, header.topic)
        )


def consume_stats(ctx: RequestContext, group: str, topic: str | None = None) -> bytes:
    """The `ConsumeStats` body of `group` for `topic`, or for every topic it committed in."""
    broker = ctx.broker
    topics = figures.group_topics(broker, group, topic)
    rows = figures.group_queues(broker, group, topics)
    figures.read_consumed_times(broker, rows)
    broker_name = broker.config.broker_name
    offsets = {
        MessageQueue(row.topic, broker_name, row.queue_id): OffsetWrapper(
            row.broker_offset, row.consumer_offset, row.last
        )
        for row in rows
    }
    rates = broker.admin.stats.key_rates()  # 4.9's consumeTps is a per-minute figure
    return ConsumeStats(offsets, figures.consume_tps(broker, rates, group, topics)).encode()


class GetAllConsumerOffsetProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        body = ConsumerOffsetWrapper(ctx.broker.offsets.table()).encode()
        return request.make_response(ResponseCode.SUCCESS, body=body)


class QueryTopicConsumeByWhoProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = QueryTopicConsumeByWhoRequestHeader.from_ext_fields(request.ext_fields)
        broker = ctx.broker
        groups = set(broker.consumers.groups_consuming(header.topic))
        groups.update(broker.offsets.groups_of(header.topic))
        return request.make_response(ResponseCode.SUCCESS, body=GroupList(tuple(groups)).encode())
