"""QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33), answered as RocketMQ 4.9's
QueryMessageProcessor: the matching records' bytes, as stored, one after another in the body.

QUERY_MESSAGE finds a topic's messages by key (a KEYS entry or the unique key) stored within
[beginTimestamp, endTimestamp] through the message index (`store.index`), at most maxNum (and
at most 64); a request flagged `_UNIQUE_KEY_QUERY` gets 4.9's default of 32 instead. The
response header says where the index stood (indexLastUpdateTimestamp /
indexLastUpdatePhyoffset); nothing found is QUERY_NOT_FOUND. VIEW_MESSAGE_BY_ID takes the
commit-log offset of an offset message id; the offset is checked before anything is read
(`store.lookup`'s rules), and an offset where no record starts is SYSTEM_ERROR, as 4.9 answers.
"""

from __future__ import annotations

from typing import Final

from broker.context import BrokerContext
from broker.processors import RequestContext
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.consumer_headers import (
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    ViewMessageRequestHeader,
)
from protocol.errors import HeaderFieldError
from store.consume_service import ConsumeService, query_message, view_message

#: the ext field a client sets when it queries by unique key (4.9's MixAll.UNIQUE_MSG_QUERY_FLAG)
UNIQUE_MSG_QUERY_FLAG: Final = "_UNIQUE_KEY_QUERY"
#: maxNum of a unique-key query (4.9's `defaultQueryMaxNum`)
DEFAULT_QUERY_MAX_NUM: Final = 32


def _consume(broker: BrokerContext) -> ConsumeService:
    if broker.consume is None:
        raise HeaderFieldError("topic", "the store has no consume side", ResponseCode.SYSTEM_ERROR)
    return broker.consume


class QueryMessageProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = QueryMessageRequestHeader.from_ext_fields(request.ext_fields)
        max_num = header.max_num
        if request.ext_fields.get(UNIQUE_MSG_QUERY_FLAG) == "true":
            max_num = DEFAULT_QUERY_MAX_NUM
        if max_num < 0:
            raise HeaderFieldError("maxNum", f"maxNum {max_num} is negative")
        broker = ctx.broker
        result = await query_message(
            _consume(broker),
            topic=header.topic,
            key=header.key,
            max_num=max_num,
            begin=header.begin_timestamp,
            end=header.end_timestamp,
            max_message_size=broker.config.store.max_message_size,
        )
        ext = QueryMessageResponseHeader(
            result.index_last_update_timestamp, result.index_last_update_phyoffset
        ).to_ext_fields()
        if not result.messages:
            return request.make_response(
                ResponseCode.QUERY_NOT_FOUND,
                "can not find message, maybe time range not correct",
                ext_fields=ext,
            )
        return request.make_response(ResponseCode.SUCCESS, None, ext_fields=ext, body=result.body)


class ViewMessageByIdProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = ViewMessageRequestHeader.from_ext_fields(request.ext_fields)
        broker = ctx.broker
        data = await view_message(
            _consume(broker), header.offset, broker.config.store.max_message_size
        )
        if data is None:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {header.offset}"
            )
        return request.make_response(ResponseCode.SUCCESS, None, body=data)
