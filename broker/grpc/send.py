"""SendMessage for RocketMQ 5 producers, through the broker's one send path.

Each 5.x message is checked as 5.x's proxy checks it (its codes: ILLEGAL_TOPIC,
MESSAGE_BODY_TOO_LARGE, MESSAGE_PROPERTIES_TOO_LARGE, ILLEGAL_MESSAGE_TAG, ...), then becomes
the SEND_MESSAGE request a 4.x producer would send (tag -> TAGS, keys -> KEYS, user properties,
message group -> `__SHARDINGKEY`, message id -> UNIQ_KEY, the topic as producer group, GZIP ->
the compressed flag, TRANSACTION -> a prepared half) and goes through `SendMessageProcessor`:
its checks, auto-creation, rewrites and store answer are the remoting path's.

The queue: the message group's hash over the writable queues (so a group's messages keep their
order), else a round robin per topic.

Delivery timestamps: 4.9 has delay levels, not 5.x's timer. A message whose timestamp lies
ahead keeps it in TIMER_DELIVER_MS and is parked at the longest level not past it; the schedule
service parks it again while its time is still ahead (`broker.rewrites.delivery_record`), so it
reaches its topic at its time, late by at most the shortest level (1 s by default), never early,
and durably as every delayed message (the schedule topic and its offsets survive a restart).
More than 3 days ahead (5.x's default limit) is refused with ILLEGAL_DELIVERY_TIME.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from typing import Final

import structlog

from broker.context import BrokerContext
from broker.grpc.methods import CallContext, Message
from broker.grpc.route import TEMPLATE_TOPIC, find_or_create
from broker.grpc.status import from_remoting, ok, status
from broker.grpc.transaction_ids import transaction_id
from broker.processors import RequestContext
from broker.processors.send import SendMessageProcessor
from broker.rewrites import TIMER_DELIVER_MS, timer_level
from protocol import names
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import HeaderFieldError
from protocol.headers import SendMessageRequestHeader
from protocol.properties import MessageConst, encode_properties
from protocol.v2 import load
from store.message import COMPRESSED_FLAG, TRANSACTION_PREPARED_TYPE, java_string_hash

log = structlog.get_logger()
_MC = MessageConst

SHARDING_KEY: Final = "__SHARDINGKEY"
TRACE_CONTEXT: Final = "TRACE_CONTEXT"
MAX_USER_PROPERTIES: Final = 128
MAX_USER_PROPERTY_BYTES: Final = 16 * 1024
MAX_MESSAGE_GROUP: Final = 64
MAX_MESSAGES_PER_CALL: Final = 1024
#: how far ahead a delivery time may lie (5.x's default timerMaxDelaySec: 3 days)
MAX_DELIVERY_AHEAD_MS: Final = 3 * 86_400_000
#: keys 5.x reserves beside 4.9's: a user property must not set them
_RESERVED: Final = _MC.SYSTEM_KEYS | {SHARDING_KEY, TRACE_CONTEXT}


class RefusedError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _has_control(text: str) -> bool:
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)


def _check_properties(message: Message) -> int:
    """The user properties, tag and keys checked; their size in bytes."""
    user: Mapping[str, str] = message.user_properties
    if len(user) > MAX_USER_PROPERTIES:
        raise RefusedError(
            "MESSAGE_PROPERTIES_TOO_LARGE", f"more than {MAX_USER_PROPERTIES} properties"
        )
    size = 0
    for key, value in user.items():
        if key in _RESERVED:
            raise RefusedError(
                "ILLEGAL_MESSAGE_PROPERTY_KEY", f"property {key} is used by the system"
            )
        if not key or _has_control(key) or _has_control(value):
            raise RefusedError(
                "ILLEGAL_MESSAGE_PROPERTY_KEY", f"property {key!r} holds control text"
            )
        size += len(key.encode()) + len(value.encode())
    system = message.system_properties
    tag = system.tag
    if tag and (not tag.strip() or "|" in tag or _has_control(tag)):
        raise RefusedError(
            "ILLEGAL_MESSAGE_TAG", f"tag {tag!r} is blank, holds '|' or control text"
        )
    size += len(tag.encode())
    for key in system.keys:
        if not key.strip() or _has_control(key):
            raise RefusedError("ILLEGAL_MESSAGE_KEY", f"key {key!r} is blank or holds control text")
        size += len(key.encode())
    if size > MAX_USER_PROPERTY_BYTES:
        raise RefusedError(
            "MESSAGE_PROPERTIES_TOO_LARGE", f"properties over {MAX_USER_PROPERTY_BYTES} bytes"
        )
    group = system.message_group
    if group and (len(group) > MAX_MESSAGE_GROUP or _has_control(group) or not group.strip()):
        raise RefusedError("ILLEGAL_MESSAGE_GROUP", f"message group {group[:80]!r} is not allowed")
    return size


def _timer(delivery_ms: int, now_ms: int, levels_ms: tuple[int, ...]) -> dict[str, str]:
    """The properties that park a message until `delivery_ms`: none when it is due already."""
    wait = delivery_ms - now_ms
    if wait <= 0 or not levels_ms:
        return {}
    if wait > MAX_DELIVERY_AHEAD_MS:
        raise RefusedError(
            "ILLEGAL_DELIVERY_TIME", f"delivery more than {MAX_DELIVERY_AHEAD_MS} ms ahead"
        )
    return {
        TIMER_DELIVER_MS: str(delivery_ms),
        _MC.DELAY_TIME_LEVEL: str(timer_level(wait, levels_ms)),
    }


class SendService:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self._processor = SendMessageProcessor()
        self._round_robin: dict[str, itertools.count[int]] = {}

    def _queue_id(self, topic: str, group: str) -> int:
        config = self.broker.topics.find(topic)
        queues = config.write_queue_nums if config is not None else 0
        if queues <= 0:
            return -1  # the processor picks one (or refuses a topic it cannot create)
        if group:
            return (java_string_hash(group) & 0x7FFFFFFF) % queues
        if len(self._round_robin) > 10_000:
            self._round_robin.clear()
        return next(self._round_robin.setdefault(topic, itertools.count())) % queues

    def _request(self, message: Message, now_ms: int) -> tuple[RemotingCommand, bool]:
        """The SEND_MESSAGE request for `message`, and whether it is a transaction's half."""
        definition, _ = load()
        topic = message.topic.name
        try:
            names.check_topic_name("topic", topic)
        except HeaderFieldError as exc:
            raise RefusedError("ILLEGAL_TOPIC", str(exc)) from exc
        limit = self.broker.config.store.max_message_size
        if len(message.body) > limit:
            raise RefusedError(
                "MESSAGE_BODY_TOO_LARGE", f"body of {len(message.body)} bytes over {limit}"
            )
        _check_properties(message)
        system = message.system_properties
        if not system.message_id.strip():
            raise RefusedError("ILLEGAL_MESSAGE_ID", "message id cannot be empty")
        props = dict(message.user_properties)
        if system.tag:
            props[_MC.TAGS] = system.tag
        if system.keys:
            props[_MC.KEYS] = _MC.KEY_SEPARATOR.join(system.keys)
        props[_MC.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = system.message_id
        props[_MC.PRODUCER_GROUP] = topic
        if system.message_group:
            props[SHARDING_KEY] = system.message_group
        if system.trace_context:
            props[TRACE_CONTEXT] = system.trace_context
        sys_flag = 0
        if system.body_encoding == definition.Encoding.Value("GZIP"):
            sys_flag |= COMPRESSED_FLAG
        half = system.message_type == definition.MessageType.Value("TRANSACTION")
        if half:
            sys_flag |= TRANSACTION_PREPARED_TYPE
            props[_MC.TRANSACTION_PREPARED] = "true"
            if system.HasField("orphaned_transaction_recovery_duration"):
                seconds = system.orphaned_transaction_recovery_duration.seconds
                props[_MC.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(max(seconds, 0))
        if system.HasField("delivery_timestamp"):
            delivery = system.delivery_timestamp
            delivery_ms = delivery.seconds * 1000 + delivery.nanos // 1_000_000
            props.update(_timer(delivery_ms, now_ms, self.broker.delay_levels_ms))
        born = system.born_timestamp
        born_ms = (
            born.seconds * 1000 + born.nanos // 1_000_000
            if system.HasField("born_timestamp")
            else now_ms
        )
        header = SendMessageRequestHeader(
            producer_group=topic,
            topic=topic,
            default_topic=TEMPLATE_TOPIC,
            default_topic_queue_nums=self.broker.config.default_topic_queue_nums,
            queue_id=self._queue_id(topic, system.message_group),
            sys_flag=sys_flag,
            born_timestamp=born_ms,
            flag=0,
            properties=encode_properties(props),
            reconsume_times=max(system.delivery_attempt - 1, 0),
        )
        request = RemotingCommand.request(
            RequestCode.SEND_MESSAGE, header.to_ext_fields(), bytes(message.body)
        )
        return request, half

    async def _send_one(self, message: Message, ctx: RequestContext, now_ms: int) -> Message:
        _, service = load()
        try:
            request, half = self._request(message, now_ms)
        except RefusedError as exc:
            return service.SendResultEntry(status=status(exc.code, str(exc)))
        response = await self._processor.process(request, ctx)
        fields = response.ext_fields or {}
        if response.code != ResponseCode.SUCCESS or "queueOffset" not in fields:
            return service.SendResultEntry(status=from_remoting(response.code, response.remark))
        offset = int(fields["queueOffset"])
        entry = service.SendResultEntry(
            status=ok(), message_id=message.system_properties.message_id, offset=offset
        )
        if half:
            commit_log_offset = int(fields.get("msgId", "0")[-16:] or "0", 16)
            entry.transaction_id = transaction_id(commit_log_offset, offset)
        return entry

    async def send_message(self, request: Message, context: CallContext) -> Message:
        _, service = load()
        messages = list(request.messages)
        if not messages or len(messages) > MAX_MESSAGES_PER_CALL:
            return service.SendMessageResponse(
                status=status("MESSAGE_CORRUPTED", f"{len(messages)} messages to send")
            )
        topic = messages[0].topic
        if any(m.topic != topic for m in messages):
            return service.SendMessageResponse(
                status=status("MESSAGE_CORRUPTED", "the messages name different topics")
            )
        try:
            names.check_topic_name("topic", topic.name)
        except HeaderFieldError:
            pass  # each entry is refused ILLEGAL_TOPIC
        else:
            # created here if it may be, so the first messages get their queue as the rest
            await find_or_create(self.broker, topic.name)
        host, _, port = context.peer.rpartition(":")
        ctx = RequestContext(
            self.broker, -context.conn_id, (host.strip("[]"), int(port) if port.isdigit() else 0)
        )
        now_ms = int(time.time() * 1000)
        entries = [await self._send_one(m, ctx, now_ms) for m in messages]
        codes = {e.status.code for e in entries}
        if len(codes) == 1:
            top = entries[0].status
        else:
            top = status("MULTIPLE_RESULTS", "the messages have different results")
        return service.SendMessageResponse(status=top, entries=entries)
