"""ReceiveMessage: RocketMQ 5's pop over gRPC, streamed as the 5.x proxy streams it.

A receive pops up to `batch_size` messages from any queue of the topic on this broker (queue id
-1), whichever queue the request names: the 5.x proxy does the same (its receive picks a broker
and pops that broker's queues as one), so a SimpleConsumer that round-robins over a route's
queues is not held for its long-polling time on each empty queue, and the Node.js client's,
which only ever names queue 0, still gets every queue's messages. The group's messages are
hidden for the invisible duration. Nothing there: the call is held until a message arrives on
one of the topic's queues or the group's pop retry queue (the store's arrival listener wakes it,
no polling), the long polling timeout passes or the client says NotifyClientTermination
(`broker.grpc.held`), never past the call's deadline less a margin for the answer to travel. The
stream is a `status`, then each `message`, then a `delivery_timestamp`, as the proxy writes
them; nothing found is a MESSAGE_NOT_FOUND status.

Refusals of the consumer RPCs are answered in the response's `Status`: `refusal` turns
`PopService`'s `HeaderFieldError` into one. `broker.grpc.status.from_remoting` maps the response
code; a few refusals say more through the field they name, and 5.x clients act on those codes:
a bad or stale receipt handle (INVALID_RECEIPT_HANDLE), an invisible time out of bounds
(ILLEGAL_INVISIBLE_TIME), a group that may not consume.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Final

import structlog
import trio

from broker.grpc.held import held_receives
from broker.grpc.methods import CallContext, Message
from broker.grpc.outbound import duration_ms, timestamp, to_v5
from broker.grpc.renew import renewals
from broker.grpc.status import from_remoting, ok, status
from broker.message_filter import SQL92, TAG, build_filter
from broker.pop.checks import check_group, refuse
from broker.pop.receipt import POP_RETRY_QUEUE_NUMS, pop_retry_topic
from broker.pop.service import MAX_POP_NUMS, PopResult, PopService
from broker.topic_config import PERM_READ
from protocol.codes import ResponseCode
from protocol.errors import HeaderFieldError
from protocol.v2 import load
from store.decode import decode_copied_records
from store.get_message import TagFilter

if TYPE_CHECKING:
    from broker.context import BrokerContext

log = structlog.get_logger()

#: the invisible time of a receive that names none (push consumers with auto renew), ms
DEFAULT_INVISIBLE_MS: Final = 60_000
#: a receive is answered this long before the call's deadline at the latest, s
DEADLINE_MARGIN_S: Final = 1.0
#: the longest long polling a receive may ask for, s (the proxy's bound)
MAX_LONG_POLLING_S: Final = 30.0
#: the queue id a receive pops: every queue of the topic
ANY_QUEUE: Final = -1


#: the field a refusal names -> its 5.x code, before the response code's own
FIELD_TO_V5: Final[dict[str, str]] = {
    "extraInfo": "INVALID_RECEIPT_HANDLE",
    "invisibleTime": "ILLEGAL_INVISIBLE_TIME",
    "consumerGroup": "CONSUMER_GROUP_NOT_FOUND",
}


def refusal(exc: HeaderFieldError) -> Message:
    """The `Status` of a refusal `PopService` raised."""
    if exc.response_code == ResponseCode.NO_PERMISSION:
        return status("FORBIDDEN", str(exc))
    name = FIELD_TO_V5.get(exc.field)
    if name is not None and exc.response_code != ResponseCode.SYSTEM_ERROR:
        return status(name, str(exc))
    if exc.response_code == ResponseCode.SYSTEM_ERROR:
        log.warning("grpc_consume_failed", field=exc.field, reason=str(exc))
    return from_remoting(exc.response_code, str(exc))


def pop_service(broker: BrokerContext) -> PopService:
    pop = broker.pop
    if pop is None or broker.consume is None:
        raise refuse(ResponseCode.SYSTEM_ERROR, "pop consumption is not served by a slave broker")
    return pop


def _response(**content: Message) -> Message:
    _, service = load()
    return service.ReceiveMessageResponse(**content)


def _filter(request: Message, broker: BrokerContext) -> TagFilter:
    """The request's filter: a SQL one is passed on as SQL92, as the 5.x proxy does, anything
    else is a TAG one, served whatever `enable_property_filter` says (the proxy's receive is a
    5.x pop, which does not look at it). Refused (`HeaderFieldError`): an expression that does
    not compile (ILLEGAL_FILTER_EXPRESSION)."""
    definition, _ = load()
    expression = request.filter_expression
    sql = definition.FilterType.Name(expression.type) == "SQL"
    return build_filter(
        expression.expression,
        SQL92 if sql else TAG,
        property_filter=True,
        field="filterExpression",
    )


class _RefusedError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def receive_handler(
    broker: BrokerContext,
) -> Callable[[Message, CallContext], AsyncIterator[Message]]:
    async def receive(request: Message, context: CallContext) -> AsyncIterator[Message]:
        group = request.group.name
        topic = request.message_queue.topic.name
        namespace = request.message_queue.topic.resource_namespace
        try:
            service = pop_service(broker)
            if not broker.config.broker_permission & PERM_READ:
                raise _RefusedError("FORBIDDEN", f"the broker[{broker.addr}] is not readable")
            tag_filter = _filter(request, broker)
            if not group:
                raise _RefusedError("ILLEGAL_CONSUMER_GROUP", "the request names no consumer group")
            if not topic:
                raise _RefusedError("ILLEGAL_TOPIC", "the request names no topic")
            queue_id = ANY_QUEUE
            service.check_topic(topic, queue_id)
            order = (await check_group(broker.groups, group)).consume_message_orderly
            invisible_ms = (
                duration_ms(request.invisible_duration)
                if request.HasField("invisible_duration") and not request.auto_renew
                else renewals(service).invisible_ms
            )
            batch = min(max(request.batch_size, 1), MAX_POP_NUMS)
            poll_s = (
                min(duration_ms(request.long_polling_timeout) / 1000, MAX_LONG_POLLING_S)
                if request.HasField("long_polling_timeout")
                else 0.0
            )
            until = min(trio.current_time() + poll_s, context.deadline - DEADLINE_MARGIN_S)

            async def once() -> PopResult:
                return await service.pop(
                    group,
                    topic,
                    -1,
                    max_nums=batch,
                    invisible_ms=invisible_ms,
                    tag_filter=tag_filter,
                    order=order,
                )

            client = context.metadata.get("x-mq-client-id", "")
            with held_receives(service).hold(context.conn_id, client) as stop:
                result = await _long_poll(service, topic, group, once, until=until, stop=stop)
        except HeaderFieldError as exc:
            yield _response(status=refusal(exc))
            return
        except _RefusedError as exc:
            yield _response(status=status(exc.code, exc.message))
            return
        if not result.messages:
            yield _response(status=status("MESSAGE_NOT_FOUND", "no new message"))
            return
        yield _response(status=ok())
        attempts = order_attempts(result.order_count_info)
        client_id = context.metadata.get("x-mq-client-id", "") if request.auto_renew else ""
        for data in result.messages:
            for record in decode_copied_records(data):
                attempt = attempts.get((record.queue_id, record.queue_offset))
                message = to_v5(
                    record,
                    topic=topic,
                    namespace=namespace,
                    invisible_ms=invisible_ms,
                    attempt=attempt,
                )
                if client_id:
                    handle = message.system_properties.receipt_handle
                    renewals(pop_service(broker)).add(
                        client_id, group, topic, handle, broker.store.now_ms()
                    )
                yield _response(message=message)
        yield _response(delivery_timestamp=timestamp(broker.store.now_ms()))

    return receive


def order_attempts(info: str) -> dict[tuple[int, int], int]:
    """(queue id, offset) -> delivery attempt, from a FIFO pop's orderCountInfo entries
    "<retry> qo<queueId>%<offset> <times handed out before>"."""
    out: dict[tuple[int, int], int] = {}
    for entry in filter(None, info.split(";")):
        _, where, times = entry.split(" ")
        queue_id, offset = where.removeprefix("qo").split("%")
        out[int(queue_id), int(offset)] = int(times) + 1
    return out


async def _long_poll(
    service: PopService,
    topic: str,
    group: str,
    once: Callable[[], Awaitable[PopResult]],
    *,
    until: float,
    stop: trio.Event,
) -> PopResult:
    """Pop; while nothing is there and time is left, wait for an arrival and pop again;
    `stop` (the client terminates) ends the waiting."""
    broker = service.broker
    consume = broker.consume
    assert consume is not None
    waiters = broker.pull_waiters
    result: PopResult = await once()
    while not result.messages and not waiters.released and not stop.is_set():
        left = until - trio.current_time()
        if left <= 0:
            break
        config = broker.topics.find(topic)
        queues = [(topic, q) for q in range(config.read_queue_nums if config else 0)]
        # the group's retry topic too, also before its first message creates it: a message
        # revived while the receive is held wakes it
        retry_name = pop_retry_topic(topic, group)
        retry = broker.topics.find(retry_name)
        retry_queues = retry.read_queue_nums if retry is not None else POP_RETRY_QUEUE_NUMS
        queues += [(retry_name, q) for q in range(retry_queues)]
        ends = {key: consume.max_offset_in_queue(*key) for key in queues}
        if not await _wait_any(service, ends, left, stop):
            break
        result = await once()
    return result


async def _wait_any(
    service: PopService, ends: dict[tuple[str, int], int], timeout_s: float, stop: trio.Event
) -> bool:
    """Wait until one of the queues grows past its end in `ends`, `timeout_s` passes or `stop`
    is set; True if a queue grew."""
    consume = service.broker.consume
    assert consume is not None
    waiters = service.broker.pull_waiters
    arrived = False
    with trio.move_on_after(timeout_s):
        async with trio.open_nursery() as nursery:

            async def watch(topic: str, queue_id: int, end: int) -> None:
                nonlocal arrived
                # the end is read again with no checkpoint before the wait registers, so an
                # arrival since the pop is never missed
                if consume.max_offset_in_queue(topic, queue_id) != end or await waiters.wait(
                    topic, queue_id, timeout_s
                ):
                    arrived = True
                    nursery.cancel_scope.cancel()

            async def stopped() -> None:
                await stop.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(stopped)
            for (topic, queue_id), end in ends.items():
                nursery.start_soon(watch, topic, queue_id, end)
    return arrived
