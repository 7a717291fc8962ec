"""The consumer calls besides the pull: committed offsets, queue bounds, the group's clients,
the check of a subscription's filter.

QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15), SEARCH_OFFSET_BY_TIMESTAMP (29),
GET_MAX_OFFSET (30), GET_MIN_OFFSET (31), GET_CONSUMER_LIST_BY_GROUP (38) and
CHECK_CLIENT_CONFIG (46), answered as RocketMQ 4.9's ConsumerManageProcessor,
AdminBrokerProcessor and ClientManageProcessor do.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.message_filter import check_expression, is_tag_type, not_served_remark
from broker.processors import RequestContext
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.consumer_headers import (
    GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    SearchOffsetByTimestampRequestHeader,
    SearchOffsetByTimestampResponseHeader,
    UpdateConsumerOffsetRequestHeader,
)
from protocol.errors import HeaderFieldError
from protocol.route import CheckClientRequestBody, ConsumerListBody
from store.consume_service import ConsumeService


def _consume(broker: BrokerContext) -> ConsumeService:
    if broker.consume is None:
        raise HeaderFieldError(
            "topic", "the store has no consume queues", ResponseCode.SYSTEM_ERROR
        )
    return broker.consume


class QueryConsumerOffsetProcessor:
    """The committed offset, raised to the queue's minimum when retention deleted the messages
    below it (the consumer goes on from the oldest one kept); for a group that never committed,
    0 when the queue still starts at 0 (a new group reads from the beginning), else
    QUERY_NOT_FOUND (the client then starts where its consume-from-where setting says)."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = QueryConsumerOffsetRequestHeader.from_ext_fields(request.ext_fields)
        broker = ctx.broker
        offset = broker.offsets.query(header.consumer_group, header.topic, header.queue_id)
        min_offset = _consume(broker).min_offset_in_queue(header.topic, header.queue_id)
        if offset is None and min_offset <= 0:
            offset = 0
        elif offset is not None:
            offset = max(offset, min_offset)
        if offset is None:
            return request.make_response(
                ResponseCode.QUERY_NOT_FOUND,
                "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
            )
        ext = QueryConsumerOffsetResponseHeader(offset).to_ext_fields()
        return request.make_response(ResponseCode.SUCCESS, None, ext_fields=ext)


class UpdateConsumerOffsetProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = UpdateConsumerOffsetRequestHeader.from_ext_fields(request.ext_fields)
        if header.commit_offset < 0:
            raise HeaderFieldError(
                "commitOffset", f"commitOffset {header.commit_offset} is negative"
            )
        ctx.broker.offsets.commit(
            header.consumer_group, header.topic, header.queue_id, header.commit_offset
        )
        return request.make_response(ResponseCode.SUCCESS)


class GetMaxOffsetProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = GetMaxOffsetRequestHeader.from_ext_fields(request.ext_fields)
        offset = _consume(ctx.broker).max_offset_in_queue(header.topic, header.queue_id)
        ext = GetMaxOffsetResponseHeader(offset).to_ext_fields()
        return request.make_response(ResponseCode.SUCCESS, None, ext_fields=ext)


class GetMinOffsetProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = GetMinOffsetRequestHeader.from_ext_fields(request.ext_fields)
        offset = _consume(ctx.broker).min_offset_in_queue(header.topic, header.queue_id)
        ext = GetMinOffsetResponseHeader(offset).to_ext_fields()
        return request.make_response(ResponseCode.SUCCESS, None, ext_fields=ext)


class SearchOffsetByTimestampProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = SearchOffsetByTimestampRequestHeader.from_ext_fields(request.ext_fields)
        offset = _consume(ctx.broker).offset_by_time(
            header.topic, header.queue_id, header.timestamp
        )
        ext = SearchOffsetByTimestampResponseHeader(offset).to_ext_fields()
        return request.make_response(ResponseCode.SUCCESS, None, ext_fields=ext)


class GetConsumerListByGroupProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = GetConsumerListByGroupRequestHeader.from_ext_fields(request.ext_fields)
        ids = ctx.broker.consumers.client_ids(header.consumer_group)
        if not ids:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {header.consumer_group}"
            )
        body = ConsumerListBody(tuple(ids)).to_json()
        return request.make_response(ResponseCode.SUCCESS, None, body=body)


class CheckClientConfigProcessor:
    """The Java push consumer asks before it starts with a SQL92 subscription whether the broker
    serves it (body: clientId, group, subscriptionData). A TAG one, or none: SUCCESS; SQL92
    without enable_property_filter: SYSTEM_ERROR; an expression that does not compile:
    SUBSCRIPTION_PARSE_FAILED with the reason, which the client shows as it fails to start."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        if not request.body:
            return request.make_response(ResponseCode.SUCCESS)
        body = CheckClientRequestBody.from_json(request.body)
        subscription = body.subscription
        if subscription is None or is_tag_type(subscription.expression_type):
            return request.make_response(ResponseCode.SUCCESS)
        kind = subscription.expression_type
        if not ctx.broker.config.enable_property_filter:
            return request.make_response(ResponseCode.SYSTEM_ERROR, not_served_remark(kind))
        check_expression(subscription.sub_string, kind, field="subscriptionData")
        return request.make_response(ResponseCode.SUCCESS)
