"""POP_MESSAGE (200050), ACK_MESSAGE (200051) and CHANGE_MESSAGE_INVISIBLETIME (200053): RocketMQ
5's pop consumption over remoting, with 5.x's headers, answered by `broker.pop.service`.

A pop that finds nothing is held up to its `pollTime` (at most `MAX_POLL_S`) and answered
PULL_NOT_FOUND, which 5.x clients read as "no new message". A FOUND answer's body is the
messages as the commit log holds them, each under the topic asked for and with its receipt
handle in POP_CK; the header carries 5.x's startOffsetInfo and msgOffsetInfo too. The filter is
the header's `exp` of type `expType`: TAG, or SQL92 (`broker.message_filter`), served whatever
`enable_property_filter` says, as 5.x's pop serves it; the switch is 4.9's, for pulls.
"""

from __future__ import annotations

from typing import Final

import trio

from broker.message_filter import build_filter
from broker.pop.checks import check_group, refuse
from broker.pop.service import PopResult, PopService
from broker.processors import RequestContext
from broker.topic_config import PERM_READ
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.pop_headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)
from store.get_message import TagFilter

#: a pop is held this long at most when nothing is there
MAX_POLL_S: Final = 20.0
POLL_STEP_S: Final = 0.1


def _service(ctx: RequestContext) -> PopService:
    pop = ctx.broker.pop
    if pop is None or ctx.broker.consume is None:
        raise refuse(ResponseCode.SYSTEM_ERROR, "pop consumption is not served by a slave broker")
    return pop


class PopMessageProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = PopMessageRequestHeader.from_ext_fields(request.ext_fields)
        service = _service(ctx)
        if not ctx.broker.config.broker_permission & PERM_READ:
            raise refuse(
                ResponseCode.NO_PERMISSION,
                f"the broker[{ctx.broker.addr}] pop message is forbidden",
            )
        service.check_topic(header.topic, header.queue_id)
        await check_group(ctx.broker.groups, header.consumer_group)
        tag_filter = build_filter(
            header.exp,
            header.exp_type,
            property_filter=True,  # 5.x's pop does not look at enablePropertyFilter
            field="exp",
        )
        result = await self._pop(service, header, tag_filter)
        code = ResponseCode.SUCCESS if result.messages else ResponseCode.PULL_NOT_FOUND
        ext = PopMessageResponseHeader(
            result.pop_time,
            result.invisible_time,
            result.revive_qid,
            result.rest_num,
            result.start_offset_info or None,
            result.msg_offset_info or None,
            result.order_count_info or None,
        ).to_ext_fields()
        body = b"".join(result.messages) if result.messages else None
        return request.make_response(code, None, ext_fields=ext, body=body)

    @staticmethod
    async def _pop(
        service: PopService, header: PopMessageRequestHeader, tag_filter: TagFilter
    ) -> PopResult:
        """Pop, and while nothing is there pop again every `POLL_STEP_S` up to the request's
        poll time (new messages and revived ones both end the wait); at shutdown at once."""
        result = await _pop_once(service, header, tag_filter)
        poll_s = min(max(header.poll_time, 0) / 1000, MAX_POLL_S)
        waiters = service.broker.pull_waiters
        with trio.move_on_after(poll_s):
            while not result.messages and not waiters.released:
                await trio.sleep(POLL_STEP_S)
                result = await _pop_once(service, header, tag_filter)
        return result


async def _pop_once(
    service: PopService, header: PopMessageRequestHeader, tag_filter: TagFilter
) -> PopResult:
    return await service.pop(
        header.consumer_group,
        header.topic,
        header.queue_id,
        max_nums=header.max_msg_nums,
        invisible_ms=header.invisible_time,
        tag_filter=tag_filter,
        init_mode=header.init_mode,
        order=header.order,
    )


class AckMessageProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = AckMessageRequestHeader.from_ext_fields(request.ext_fields)
        service = _service(ctx)
        service.check_topic(header.topic, header.queue_id)
        await service.ack(
            header.consumer_group, header.topic, header.queue_id, header.offset, header.extra_info
        )
        return request.make_response(ResponseCode.SUCCESS)


class ChangeInvisibleTimeProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = ChangeInvisibleTimeRequestHeader.from_ext_fields(request.ext_fields)
        service = _service(ctx)
        service.check_topic(header.topic, header.queue_id)
        changed = await service.change_invisible(
            header.consumer_group,
            header.topic,
            header.queue_id,
            header.offset,
            header.extra_info,
            invisible_ms=header.invisible_time,
        )
        ext = ChangeInvisibleTimeResponseHeader(
            changed.pop_time, changed.invisible_time, changed.revive_qid
        ).to_ext_fields()
        return request.make_response(ResponseCode.SUCCESS, None, ext_fields=ext)
