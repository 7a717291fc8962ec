"""A push-style consumer: a handler called for each message, over the pull consumer.

    async def handle(message: ReceivedMessage) -> None:
        print(message.topic, message.tags, message.body)

    async with open_push_consumer("127.0.0.1", 10911, "my-group", handle) as consumer:
        await consumer.subscribe("Orders", "TagA || TagB")
        ...  # messages are handled in the background until the block ends

One task per queue long-polls the broker (PULL_MESSAGE held until a message arrives), calls the
handler for each message in order, and commits the queue's offset once the handler has returned.
A handler that raises sends the message back (CONSUMER_SEND_MSG_BACK): the broker stores it again
in the group's `%RETRY%<group>` topic after a delay, which this consumer also reads, so it comes
back with one more `reconsume_times`; past `max_reconsume_times` the broker moves it to the
dead-letter topic. If even the send-back fails, the offset stays before the message and it is
handled again. The group is assumed to have this one consumer: every queue is read, with no
rebalancing between several.

`stop()` (or leaving the block) ends the long polls at once, lets a running handler finish,
commits what was handled and returns; a new consumer of the group starts after that offset. A
handler must not await `stop()` itself (it would wait for its own end): it may start it in a
task of its own instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

import structlog
import trio

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.consumer_headers import ConsumerSendMsgBackRequestHeader
from protocol.properties import MessageConst, decode_properties
from rmq_client.producer import UNREACHABLE, SendError
from rmq_client.pull_consumer import PullConsumer, open_pull_consumer
from store.decode import CommitLogRecord

log = structlog.get_logger()

RETRY_PREFIX: Final = "%RETRY%"
#: how long a pull is held by the broker when nothing is there
POLL_MS: Final = 15_000
#: the Java push consumer's default limit of retries before the dead-letter topic
DEFAULT_MAX_RECONSUME_TIMES: Final = 16
HEARTBEAT_S: Final = 30.0
#: pause before asking again for a topic's route, or after a failed send-back
RETRY_PAUSE_S: Final = 1.0


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """A message as the handler sees it; a retried one carries its original topic."""

    topic: str
    body: bytes
    tags: str | None
    keys: str | None
    properties: dict[str, str]
    queue_id: int
    queue_offset: int
    reconsume_times: int
    #: the record as pulled (its own topic is `%RETRY%<group>` for a retry)
    record: CommitLogRecord

    @property
    def msg_id(self) -> str | None:
        return self.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)


Handler = Callable[[ReceivedMessage], Awaitable[None]]


def received(record: CommitLogRecord) -> ReceivedMessage:
    props = decode_properties(record.properties)
    return ReceivedMessage(
        topic=props.get(MessageConst.RETRY_TOPIC, record.topic),
        body=record.body or b"",
        tags=props.get(MessageConst.TAGS),
        keys=props.get(MessageConst.KEYS),
        properties=props,
        queue_id=record.queue_id,
        queue_offset=record.queue_offset,
        reconsume_times=record.reconsume_times,
        record=record,
    )


def tag_filter(expression: str) -> frozenset[str] | None:
    """The tags `A || B` names; None for `*` (every message)."""
    tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
    return None if not tags or "*" in tags else tags


class PushConsumer:
    """Use `open_push_consumer`; `subscribe` starts reading a topic."""

    def __init__(
        self,
        puller: PullConsumer,
        handler: Handler,
        nursery: trio.Nursery,
        *,
        max_reconsume_times: int,
        retry_delay_level: int,
    ) -> None:
        self.puller = puller
        self.handler = handler
        self.max_reconsume_times = max_reconsume_times
        self.retry_delay_level = retry_delay_level
        self._nursery = nursery
        self._stopping = False
        self._running = 0
        self._idle = trio.Event()
        self._idle.set()

    @property
    def group(self) -> str:
        return self.puller.group

    async def subscribe(self, topic: str, expression: str = "*") -> None:
        """Announce the subscription and start one task per queue of `topic`."""
        if self._stopping:
            raise RuntimeError("the consumer is stopped")
        retry = RETRY_PREFIX + self.group
        first = not self.puller.subscriptions
        self.puller.subscriptions[topic] = expression
        if first:
            self.puller.subscriptions[retry] = "*"
        await self.puller.heartbeat()
        self._nursery.start_soon(self._read_topic, topic, expression)
        if first:
            self._nursery.start_soon(self._read_topic, retry, "*")
            self._nursery.start_soon(self._heartbeats)

    async def stop(self) -> None:
        """Stop pulling, let running handlers finish and commit; idempotent."""
        self._stopping = True
        self._nursery.cancel_scope.cancel()
        await self._idle.wait()

    async def _heartbeats(self) -> None:
        while True:
            await trio.sleep(HEARTBEAT_S)
            await self.puller.heartbeat()

    async def _read_topic(self, topic: str, expression: str) -> None:
        queues = await self._queue_count(topic)
        for queue_id in range(queues):
            self._nursery.start_soon(self._read_queue, topic, queue_id, expression)

    async def _queue_count(self, topic: str) -> int:
        while True:
            try:
                route = await self.puller.connection.get_route(topic)
            except SendError as exc:
                if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                    raise
                await trio.sleep(RETRY_PAUSE_S)
                continue
            return max((q.read_queue_nums for q in route.queue_datas), default=0)

    async def _start_offset(self, topic: str, queue_id: int) -> int:
        committed = await self.puller.committed(topic, queue_id)
        if committed is not None and committed >= 0:
            return committed
        return await self.puller.min_offset(topic, queue_id)

    async def _read_queue(self, topic: str, queue_id: int, expression: str) -> None:
        wanted = tag_filter(expression)
        offset = await self._start_offset(topic, queue_id)
        while not self._stopping:
            result = await self.puller.pull(
                topic, queue_id, offset, expression=expression, suspend_ms=POLL_MS
            )
            if not result.found:
                offset = result.next_begin_offset
                continue
            # stop() cancels the polls, never a handler halfway or the commit after it
            with trio.CancelScope(shield=True):
                next_offset = await self._handle_batch(
                    topic, queue_id, offset, result.records, wanted
                )
            if next_offset is None:
                return
            offset = next_offset

    async def _handle_batch(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        records: list[CommitLogRecord],
        wanted: frozenset[str] | None,
    ) -> int | None:
        """Handle `records` in order; the offset to pull from next, None once stopped."""
        self._running += 1
        self._idle = trio.Event() if self._running == 1 else self._idle
        start = offset
        try:
            for record in records:
                if self._stopping:
                    break
                message = received(record)
                if (wanted is None or message.tags in wanted) and not await self._deliver(message):
                    break  # neither handled nor sent back: pull it again
                offset = record.queue_offset + 1
            if offset != start:
                await self.puller.commit(topic, queue_id, offset)
        finally:
            self._running -= 1
            if self._running == 0:
                self._idle.set()
        return None if self._stopping else offset

    async def _deliver(self, message: ReceivedMessage) -> bool:
        """Run the handler; on its failure send the message back. False if both failed."""
        try:
            await self.handler(message)
        except Exception as exc:
            log.warning(
                "push_consumer_handler_failed",
                group=self.group,
                topic=message.topic,
                queue_offset=message.queue_offset,
                reconsume_times=message.reconsume_times,
                error=repr(exc),
            )
            return await self._send_back(message)
        return True

    async def _send_back(self, message: ReceivedMessage) -> bool:
        header = ConsumerSendMsgBackRequestHeader(
            message.record.physical_offset,
            self.group,
            self.retry_delay_level,
            origin_msg_id=message.msg_id,
            origin_topic=message.topic,
            max_reconsume_times=self.max_reconsume_times,
        )
        command = RemotingCommand.request(
            RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext_fields()
        )
        try:
            response = await self.puller.connection.request(command)
        except UNREACHABLE as exc:
            why = repr(exc)
        else:
            if response.code == ResponseCode.SUCCESS:
                return True
            why = f"{ResponseCode.name_of(response.code)}: {response.remark}"
        log.warning("push_consumer_send_back_failed", group=self.group, error=why)
        await trio.sleep(RETRY_PAUSE_S)
        return False


@asynccontextmanager
async def open_push_consumer(
    host: str,
    port: int,
    group: str,
    handler: Handler,
    *,
    max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES,
    retry_delay_level: int = 0,
    client_id: str = "python-push@0",
    **kwargs: Any,
) -> AsyncIterator[PushConsumer]:
    """Connect (the options of `open_producer`); consuming stops when the block ends.

    `retry_delay_level` 0 lets the broker choose (3 + the message's reconsume times).
    """
    async with (
        open_pull_consumer(host, port, group, client_id=client_id, **kwargs) as puller,
        trio.open_nursery() as outer,
    ):
        # the queue tasks get a nursery of their own: stop() cancels it, not the caller's block
        polls: trio.Nursery = await outer.start(_polls_nursery)
        consumer = PushConsumer(
            puller,
            handler,
            polls,
            max_reconsume_times=max_reconsume_times,
            retry_delay_level=retry_delay_level,
        )
        try:
            yield consumer
        finally:
            with trio.CancelScope(shield=True):
                await consumer.stop()


async def _polls_nursery(*, task_status: trio.TaskStatus[trio.Nursery]) -> None:
    async with trio.open_nursery() as nursery:
        task_status.started(nursery)
        await trio.sleep_forever()
