"""The consumer side of RocketMQ 5's MessagingService, over the broker's `PopService`.

- ReceiveMessage (`broker.grpc.receive`): pop with long polling, streamed.
- AckMessage: each entry's receipt handle acknowledged; a status per entry, and the call's own
  status OK when every entry is, MULTIPLE_RESULTS when some are not, or the one refusal when
  all fail alike (the proxy's rule). A FIFO group's ack wakes the receives held on its queue.
- ChangeInvisibleDuration: the message hidden anew from now; the answer carries its new
  receipt handle, which the next ack or change must name. A push consumer names the handle it
  received, which auto renew may have replaced: the current one is changed, and the message is
  no longer renewed (the client chose its invisible time).
- ForwardMessageToDeadLetterQueue: a push consumer gave up on the message: it goes to
  `%DLQ%<group>` and is acknowledged.
- QueryAssignment: push consumers in pop mode get one assignment per readable topic, the whole
  topic (queue id -1) on this broker, reached at the endpoints the client asked with.

Refusals are answered in the response's `Status` (`broker.grpc.receive.refusal`), never by
ending the call with a gRPC error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from broker.grpc.methods import CallContext, Kind, Message, Method, path
from broker.grpc.outbound import duration_ms
from broker.grpc.receive import pop_service, receive_handler, refusal
from broker.grpc.renew import renewals
from broker.grpc.status import ok, status
from broker.pop.checks import check_group, parse_receipt, refuse
from broker.pop.receipt import Receipt
from broker.pop.revive import forward_to_dead_letter
from broker.pop.service import PopService
from broker.topic_config import PERM_READ, PERM_WRITE
from protocol.codes import ResponseCode
from protocol.errors import HeaderFieldError
from protocol.v2 import load

if TYPE_CHECKING:
    from broker.context import BrokerContext

log = structlog.get_logger()


def consume_methods(broker: BrokerContext) -> dict[str, Method]:
    """The consumer RPCs, by `:path`."""
    _, service = load()
    return {
        path("ReceiveMessage"): Method(
            Kind.SERVER_STREAM, service.ReceiveMessageRequest, receive_handler(broker)
        ),
        path("AckMessage"): Method(Kind.UNARY, service.AckMessageRequest, _Ack(broker)),
        path("ChangeInvisibleDuration"): Method(
            Kind.UNARY, service.ChangeInvisibleDurationRequest, _Change(broker)
        ),
        path("ForwardMessageToDeadLetterQueue"): Method(
            Kind.UNARY, service.ForwardMessageToDeadLetterQueueRequest, _Forward(broker)
        ),
        path("QueryAssignment"): Method(
            Kind.UNARY, service.QueryAssignmentRequest, _Assignment(broker)
        ),
    }


class _Ack:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    async def __call__(self, request: Message, context: CallContext) -> Message:
        _, service = load()
        group, topic = request.group.name, request.topic.name
        entries = []
        try:
            pop = pop_service(self.broker)
            pop.check_topic(topic, -1)
        except HeaderFieldError as exc:
            return service.AckMessageResponse(status=refusal(exc))
        held = renewals(pop)
        client_id = context.metadata.get("x-mq-client-id", "")
        for entry in request.entries:
            try:
                handle = held.current(client_id, entry.receipt_handle)
                receipt = parse_receipt(handle)
                self._check_not_lapsed(pop, group, topic, receipt)
                await pop.ack(group, topic, receipt.queue_id, receipt.queue_offset, handle)
                held.forget(client_id, entry.receipt_handle)
                outcome = ok()
                self._release_fifo(group, topic, receipt.queue_id)
            except HeaderFieldError as exc:
                outcome = refusal(exc)
            entries.append(
                service.AckMessageResultEntry(
                    message_id=entry.message_id,
                    receipt_handle=entry.receipt_handle,
                    status=outcome,
                )
            )
        return service.AckMessageResponse(status=_overall(entries), entries=entries)

    def _check_not_lapsed(self, pop: PopService, group: str, topic: str, receipt: Receipt) -> None:
        """An ack under a handle whose invisible time ran out and whose message was handed on
        (revived) acknowledges nothing: refused, so the client knows it will come again."""
        real = receipt.real_topic(topic, group)
        key = (group, real, receipt.queue_id, receipt.ck_offset, receipt.pop_time)
        ck = pop.inflight.get(key)
        in_flight = ck is not None and receipt.queue_offset in ck.unacked()
        if not in_flight and receipt.revive_time < self.broker.store.now_ms():
            raise refuse(
                ResponseCode.NO_MESSAGE,
                "the receipt handle has expired: the message is visible again or acknowledged",
                "extraInfo",
            )

    def _release_fifo(self, group: str, topic: str, queue_id: int) -> None:
        """A FIFO group's queue hands out its next message once the one in flight is acked:
        wake the receives held on it, as an arrival would."""
        config = self.broker.groups.find(group)
        if config is not None and config.consume_message_orderly:
            self.broker.pull_waiters.on_arrival(topic, queue_id, 0)


def _overall(entries: list[Message]) -> Message:
    """OK if every entry is; the one status if all failed alike; else MULTIPLE_RESULTS."""
    definition, _ = load()
    codes = {e.status.code for e in entries}
    if not entries or codes == {definition.Code.Value("OK")}:
        return ok()
    if len(codes) == 1:
        return entries[0].status
    return status("MULTIPLE_RESULTS", "some entries failed, see each entry's status")


class _Change:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    async def __call__(self, request: Message, context: CallContext) -> Message:
        _, service = load()
        group, topic = request.group.name, request.topic.name
        try:
            pop = pop_service(self.broker)
            pop.check_topic(topic, -1)
            held = renewals(pop)
            client_id = context.metadata.get("x-mq-client-id", "")
            handle = held.current(client_id, request.receipt_handle)
            receipt = parse_receipt(handle)
            changed = await pop.change_invisible(
                group,
                topic,
                receipt.queue_id,
                receipt.queue_offset,
                handle,
                invisible_ms=duration_ms(request.invisible_duration),
            )
            held.forget(client_id, request.receipt_handle)
        except HeaderFieldError as exc:
            return service.ChangeInvisibleDurationResponse(status=refusal(exc))
        return service.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=changed.receipt)


class _Forward:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    async def __call__(self, request: Message, context: CallContext) -> Message:
        _, service = load()
        group, topic = request.group.name, request.topic.name
        try:
            pop = pop_service(self.broker)
            await check_group(self.broker.groups, group)
            held = renewals(pop)
            client_id = context.metadata.get("x-mq-client-id", "")
            handle = held.current(client_id, request.receipt_handle)
            await forward_to_dead_letter(pop, group, topic, handle)
            held.forget(client_id, request.receipt_handle)
        except HeaderFieldError as exc:
            return service.ForwardMessageToDeadLetterQueueResponse(status=refusal(exc))
        return service.ForwardMessageToDeadLetterQueueResponse(status=ok())


class _Assignment:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    async def __call__(self, request: Message, context: CallContext) -> Message:
        definition, service = load()
        topic = request.topic.name
        try:
            pop = pop_service(self.broker)
            config = pop.check_topic(topic, -1)
            await check_group(self.broker.groups, request.group.name)
        except HeaderFieldError as exc:
            return service.QueryAssignmentResponse(status=refusal(exc))
        readable = config.read_queue_nums > 0 and self.broker.config.broker_permission & PERM_READ
        if not readable:
            return service.QueryAssignmentResponse(
                status=status("FORBIDDEN", f"the topic {topic} has no readable queue here")
            )
        perm = config.perm & (PERM_READ | PERM_WRITE)
        permission = {
            PERM_READ | PERM_WRITE: "READ_WRITE",
            PERM_READ: "READ",
        }.get(perm, "READ")
        queue = definition.MessageQueue(
            topic=request.topic,
            id=-1,
            permission=definition.Permission.Value(permission),
            broker=definition.Broker(
                name=self.broker.config.broker_name, id=0, endpoints=request.endpoints
            ),
        )
        return service.QueryAssignmentResponse(
            status=ok(), assignments=[definition.Assignment(message_queue=queue)]
        )
