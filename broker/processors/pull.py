"""PULL_MESSAGE (11): messages of one queue from a logical offset, with long polling.

RocketMQ 4.9's `PullMessageProcessor`, in its order: broker and group permissions, the topic
and queue id, the subscription (from the request when it carries one, else the group's from
heartbeats), the read through the store's consume queues, the status mapping below (its table
is `responses.GET_RESULT_TO_RESPONSE`), long polling for a pull that found nothing
(`FLAG_SUSPEND`), and storing the commit offset the request carries (`FLAG_COMMIT_OFFSET`),
which never moves a committed offset back. The body of a FOUND answer is the stored records,
concatenated, exactly as the commit log holds them: the clients decode them.

    store status                          response                 nextBeginOffset
    FOUND                                 SUCCESS                  after the last one read
    NO_MATCHED_MESSAGE, WAS_REMOVING      PULL_RETRY_IMMEDIATELY   past the skipped units
    OFFSET_FOUND_NULL, OVERFLOW_ONE       PULL_NOT_FOUND (or hold) the requested offset
    OFFSET_TOO_SMALL, OVERFLOW_BADLY      PULL_OFFSET_MOVED        min (or max) offset
    NO_MESSAGE_IN_QUEUE, NO_MATCHED_LOGIC_QUEUE   PULL_NOT_FOUND (or hold) at 0, else
                                                  PULL_OFFSET_MOVED
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from broker.ha.service import suggest_broker_id
from broker.message_filter import build_filter
from broker.processors import RequestContext
from broker.processors.namesrv import FAQ_SUFFIX
from broker.responses import pull_response_code
from broker.topic_config import PERM_READ
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.consumer_headers import (
    FLAG_COMMIT_OFFSET,
    FLAG_SUBSCRIPTION,
    FLAG_SUSPEND,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
)
from protocol.errors import HeaderFieldError
from store.get_message import GetMessageResult, TagFilter

if TYPE_CHECKING:
    from broker.context import BrokerContext

#: a client asks for at most this long a hold; longer requests are capped (its own timeout is
#: longer still, so the answer comes before it gives up)
MAX_SUSPEND_S: Final = 30.0
MASTER_ID: Final = 0
#: messages per answer at most (upstream's maxTransferCountOnMessageInMemory)
MAX_PULL_MSG_NUMS: Final = 32


def _reject(code: int, remark: str) -> HeaderFieldError:
    return HeaderFieldError("topic", remark, code)


class PullMessageProcessor:
    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        header = PullMessageRequestHeader.from_ext_fields(request.ext_fields)
        broker = ctx.broker
        await broker.groups.find_or_create(header.consumer_group)
        tag_filter = self._check(header, broker, ctx.remote_text)
        consume = broker.consume
        if consume is None:
            raise _reject(ResponseCode.SYSTEM_ERROR, "the store has no consume queues")
        if header.sys_flag & FLAG_COMMIT_OFFSET and header.commit_offset >= 0:
            broker.offsets.commit(
                header.consumer_group,
                header.topic,
                header.queue_id,
                header.commit_offset,
                forward_only=True,  # a late pull must not undo a newer commit
            )
        found = await self._read(header, tag_filter, broker)
        # nothing new: held only when the client asked (FLAG_SUSPEND), else answered at once,
        # as 4.9 answers a non-blocking pull (DefaultMQPullConsumer.pull)
        if (
            header.sys_flag & FLAG_SUSPEND
            and pull_response_code(found.status, header.queue_offset) is ResponseCode.PULL_NOT_FOUND
        ):
            suspend_s = min(header.suspend_timeout_millis / 1000, MAX_SUSPEND_S)
            if await broker.pull_waiters.wait(header.topic, header.queue_id, suspend_s):
                found = await self._read(header, tag_filter, broker)
        suggested = suggest_broker_id(broker, header.consumer_group, found)
        return self._response(request, header, found, suggested)

    @staticmethod
    async def _read(
        header: PullMessageRequestHeader, tag_filter: TagFilter, broker: BrokerContext
    ) -> GetMessageResult:
        assert broker.consume is not None
        found = await broker.consume.pull(
            header.topic,
            header.queue_id,
            header.queue_offset,
            max(1, min(header.max_msg_nums, MAX_PULL_MSG_NUMS)),
            tag_filter,
        )
        broker.admin.stats.record_get(len(found.messages))
        return found

    @staticmethod
    def _check(header: PullMessageRequestHeader, broker: BrokerContext, remote: str) -> TagFilter:
        ip = broker.config.store_host_ip
        if not broker.config.broker_permission & PERM_READ:
            raise _reject(
                ResponseCode.NO_PERMISSION, f"the broker[{ip}] pulling message is forbidden"
            )
        group = broker.groups.find(header.consumer_group)
        if group is None:
            raise _reject(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{header.consumer_group}] does not exist",
            )
        if not group.consume_enable:
            raise _reject(
                ResponseCode.NO_PERMISSION,
                f"subscription group no permission, {header.consumer_group}",
            )
        topic = broker.topics.find(header.topic)
        if topic is None:
            raise _reject(
                ResponseCode.TOPIC_NOT_EXIST,
                # 4.9 formats "%s %s" with FAQUrl.suggestTodo, which starts with a newline
                f"topic[{header.topic}] not exist, apply first please! {FAQ_SUFFIX}",
            )
        if not topic.perm & PERM_READ:
            raise _reject(
                ResponseCode.NO_PERMISSION,
                f"the topic[{header.topic}] pulling message is forbidden",
            )
        if not 0 <= header.queue_id < topic.read_queue_nums:
            raise _reject(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{header.queue_id}] is illegal, topic:[{header.topic}] "
                # the consumer's address as Java prints a socket address
                f"topicConfig.readQueueNums:[{topic.read_queue_nums}] consumer:[/{remote}]",
            )
        enabled = broker.config.enable_property_filter
        if header.sys_flag & FLAG_SUBSCRIPTION:
            return build_filter(
                header.subscription,
                header.expression_type,
                property_filter=enabled,
                field="subscription",
            )
        known = broker.consumers.subscription(header.consumer_group, header.topic)
        if known is None:
            raise _reject(
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                f"the consumer's subscription not exist, group: {header.consumer_group}",
            )
        try:
            return build_filter(
                known.sub_string,
                known.expression_type,
                property_filter=enabled,
                field="subscription",
            )
        except HeaderFieldError as exc:
            if exc.response_code != ResponseCode.SUBSCRIPTION_PARSE_FAILED:
                raise
            # 4.9 keeps no filter data for a heartbeat's expression that does not compile
            raise _reject(
                ResponseCode.FILTER_DATA_NOT_EXIST,
                f"The broker's consumer filter data is not exist! {exc}",
            ) from None

    @staticmethod
    def _response(
        request: RemotingCommand,
        header: PullMessageRequestHeader,
        found: GetMessageResult,
        suggested: int,
    ) -> RemotingCommand:
        code = pull_response_code(found.status, header.queue_offset)
        ext = PullMessageResponseHeader(
            suggested, found.next_begin_offset, found.min_offset, found.max_offset
        ).to_ext_fields()
        body = b"".join(found.messages) if code == ResponseCode.SUCCESS else None
        return request.make_response(code, None, ext_fields=ext, body=body)
