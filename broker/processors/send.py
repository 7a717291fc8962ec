"""`SendMessageProcessor`: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320).

The broker half of the send path (spec: send-path.md sections 2, 5 and 6): parse the V1/V2
header, run the checks (`send_checks`), build finished `MessageExtBrokerInner` records (peer as
born host, broker_ip1:port as store host, CLUSTER added, WAIT stripped, half-message, delay and
retry/DLQ rewrites, client-side batches split into records), hand them to the store and map its
outcome through `responses.PUT_RESULT_TO_RESPONSE`. The header's batch flag, not the request
code, selects the batch path ("1" counts as true: the C++ client sends it). Every response,
success or failure, carries MSG_REGION and TRACE_ON.
"""

from __future__ import annotations

import random
import time
from typing import Final

import structlog
import trio

from broker.processors import RequestContext, Respond
from broker.processors.send_checks import (
    Destination,
    check_allowed,
    check_broker_accepts,
    check_property_pairs,
    check_queue_id,
    check_topic_name,
    find_or_create_topic,
    retry_or_dlq,
)
from broker.responses import SEND_OK_STATUSES, put_result_response
from broker.topic_config import (
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_DELAY_LEVELS,
    SCHEDULE_TOPIC,
    TRANS_HALF_TOPIC,
    TopicConfig,
)
from protocol.batch import decode_batch_body
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.compression import COMPRESSED_FLAG, COMPRESSION_TYPE_MASK, decompress_body
from protocol.errors import HeaderFieldError
from protocol.headers import SendMessageRequestHeader, decode_send_header
from protocol.properties import MessageConst, decode_properties, encode_properties
from store.message import (
    MULTI_TAGS_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    PutMessageResult,
    get_transaction_value,
    java_string_hash,
    reset_transaction_value,
)
from store.message import MessageExtBrokerInner as Inner
from store.status import PutMessageStatus

MAX_PROPERTIES_LENGTH: Final = 32767
log = structlog.get_logger()
_MC = MessageConst


#: the remark of a send turned away while the store is busy (RocketMQ's wording)
REJECT_REQUEST_REMARK: Final = "[REJECTREQUEST]system busy, start flow control for a while"

#: the store treats NUL in properties as a torn (zero-filled) write, so none may be stored
NUL_REMARK: Final = "message properties may not contain the NUL character"


def _illegal(remark: str) -> HeaderFieldError:
    return HeaderFieldError("body", remark, ResponseCode.MESSAGE_ILLEGAL)


class SendMessageProcessor:
    """Stateless apart from its random source (used for queueId < 0).

    Two ways in: `process` (a task awaits the store) and `submit` (no task: the store calls
    back). Both run the same checks and build the same records and responses; `submit` declines
    the requests that may create a topic (its table is persisted with an await).
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def _ext(self, ctx: RequestContext) -> dict[str, str]:
        config = ctx.broker.config
        return {
            _MC.MSG_REGION: config.region_id,
            _MC.TRACE_SWITCH: "true" if config.trace_on else "false",
        }

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        ext = self._ext(ctx)
        rejected = self._reject_request(request, ctx, ext)
        if rejected is not None:
            return rejected
        try:
            return await self._send(request, ctx, ext)
        except HeaderFieldError as exc:
            return request.make_response(exc.response_code, str(exc), ext_fields=ext)

    def submit_burst(
        self, requests: list[RemotingCommand], ctx: RequestContext, respond: Respond
    ) -> list[RemotingCommand]:
        return [request for request in requests if not self.submit(request, ctx, respond)]

    def submit(self, request: RemotingCommand, ctx: RequestContext, respond: Respond) -> bool:
        """The send path without a task: checks and records here, the response from the
        store's callback. False (nothing done) for a topic that is not known yet or a
        `%RETRY%` topic: those may create topics, which `process` persists."""
        ext = self._ext(ctx)
        rejected = self._reject_request(request, ctx, ext)
        if rejected is not None:
            respond(request, rejected)
            return True
        started = trio.current_time()
        try:
            header = decode_send_header(request.code, request.ext_fields)
            check_broker_accepts(header.topic, ctx.broker, int(time.time() * 1000))
            check_topic_name(header.topic)
            check_allowed(header.topic)
            topic_config = ctx.broker.topics.find(header.topic)
            if topic_config is None or header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                return False
            queue_id, sys_flag = self._queue_and_flag(header, topic_config, ctx)
            if header.batch:
                records = self._batch_records(request, header, queue_id, sys_flag, ctx)
            else:
                destination = Destination(header.topic, queue_id, False, False)
                records = [self._single_record(request, header, destination, sys_flag, ctx)]
        except HeaderFieldError as exc:
            respond(request, request.make_response(exc.response_code, str(exc), ext_fields=ext))
            return True

        def on_result(result: PutMessageResult) -> None:
            try:
                response = self._response(
                    request,
                    ctx,
                    ext,
                    topic=header.topic,
                    queue_id=queue_id,
                    records=records,
                    result=result,
                    started=started,
                )
            except Exception as exc:
                log.exception("send_response_failed")
                response = request.make_response(ResponseCode.SYSTEM_ERROR, str(exc) or repr(exc))
            respond(request, response)

        ctx.broker.store.submit_messages(records, on_result)
        return True

    def _reject_request(
        self, request: RemotingCommand, ctx: RequestContext, ext: dict[str, str]
    ) -> RemotingCommand | None:
        """RocketMQ's `rejectRequest`: while the writer is stuck on the page cache, a send is
        turned away with SYSTEM_BUSY before any work is done (a put that got past this check
        still gets OS_PAGE_CACHE_BUSY from the store). RocketMQ also rejects while its transient
        store pool has no free buffer; here a segment without a buffer is written in place."""
        if not ctx.broker.store.is_os_page_cache_busy():
            return None
        if ctx.broker.metrics is not None:
            ctx.broker.metrics.record_system_busy("os_page_cache_busy")
        return request.make_response(
            ResponseCode.SYSTEM_BUSY, REJECT_REQUEST_REMARK, ext_fields=ext
        )

    async def _send(
        self, request: RemotingCommand, ctx: RequestContext, ext: dict[str, str]
    ) -> RemotingCommand:
        started = trio.current_time()
        header = decode_send_header(request.code, request.ext_fields)
        check_broker_accepts(header.topic, ctx.broker, int(time.time() * 1000))
        check_topic_name(header.topic)
        check_allowed(header.topic)
        checked = find_or_create_topic(header, ctx.broker)
        if checked.created:
            await ctx.broker.topics.persist()
        queue_id, sys_flag = self._queue_and_flag(header, checked.topic_config, ctx)
        if header.batch:
            records = self._batch_records(request, header, queue_id, sys_flag, ctx)
            result = await ctx.broker.store.put_messages(records)
        else:
            if header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                await ctx.broker.groups.find_or_create(
                    header.topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
                )
            destination = retry_or_dlq(header, queue_id, request.version, ctx.broker)
            if destination.created:
                await ctx.broker.topics.persist()
            record = self._single_record(request, header, destination, sys_flag, ctx)
            result = await ctx.broker.store.put_message(record)
            records = [record]
        return self._response(
            request,
            ctx,
            ext,
            topic=header.topic,
            queue_id=queue_id,
            records=records,
            result=result,
            started=started,
        )

    def _queue_and_flag(
        self, header: SendMessageRequestHeader, topic_config: TopicConfig, ctx: RequestContext
    ) -> tuple[int, int]:
        check_queue_id(header.queue_id, topic_config, ctx)
        queue_id = header.queue_id
        if queue_id < 0:
            if topic_config.write_queue_nums <= 0:
                raise HeaderFieldError("queueId", f"topic[{header.topic}] has no writable queue", 1)
            queue_id = self._rng.randrange(99_999_999) % topic_config.write_queue_nums
        sys_flag = header.sys_flag
        if topic_config.topic_filter_type == "MULTI_TAG":
            sys_flag |= MULTI_TAGS_FLAG
        return queue_id, sys_flag

    def _response(
        self,
        request: RemotingCommand,
        ctx: RequestContext,
        ext: dict[str, str],
        *,
        topic: str,
        queue_id: int,
        records: list[Inner],
        result: PutMessageResult,
        started: float,
    ) -> RemotingCommand:
        self._observe(ctx, topic, result.status, records, started)
        append = result.append_result
        store = ctx.broker.config.store
        if result.status in SEND_OK_STATUSES and append is not None:
            code, _ = put_result_response(
                result.status,
                max_message_size=store.max_message_size,
                store_dir=store.store_path_root_dir,
            )
            ext.update(
                msgId=append.msg_id, queueId=str(queue_id), queueOffset=str(append.logics_offset)
            )
            return request.make_response(code, None, ext_fields=ext)
        code, remark = put_result_response(
            result.status,
            max_message_size=store.max_message_size,
            store_dir=store.store_path_root_dir,
            put_queue_capacity=store.put_queue_capacity,
        )
        return request.make_response(code, remark, ext_fields=ext)

    def _single_record(
        self,
        request: RemotingCommand,
        header: SendMessageRequestHeader,
        destination: Destination,
        sys_flag: int,
        ctx: RequestContext,
    ) -> Inner:
        broker = ctx.broker
        if header.properties and "\x00" in header.properties:
            raise _illegal(NUL_REMARK)
        props = decode_properties(header.properties)
        check_property_pairs(props)
        if destination.dead_letter:
            props.pop(_MC.DELAY_TIME_LEVEL, None)
        props[_MC.CLUSTER] = broker.config.broker_cluster_name
        wait_text = props.pop(_MC.WAIT_STORE_MSG_OK, None)
        properties_string = encode_properties(props)
        if wait_text is not None:
            props[_MC.WAIT_STORE_MSG_OK] = wait_text  # kept for rebuilds below, as upstream does
        record = Inner(
            topic=destination.topic,
            queue_id=destination.queue_id,
            body=request.body or b"",
            properties_string=properties_string,
            sys_flag=sys_flag,
            flag=header.flag,
            born_timestamp=header.born_timestamp,
            born_host=ctx.remote,
            store_host=broker.store_host,
            reconsume_times=header.reconsume_times or 0,
            wait_store_msg_ok=wait_text is None or wait_text.lower() == "true",
            tags_code=java_string_hash(props[_MC.TAGS]) if _MC.TAGS in props else 0,
        )
        if props.get(_MC.TRANSACTION_PREPARED, "").lower() == "true":
            if broker.config.reject_transaction_message:
                raise HeaderFieldError(
                    "properties",
                    f"the broker[{broker.store_host[0]}] sending transaction message is forbidden",
                    ResponseCode.NO_PERMISSION,
                )
            _to_half_message(record, props)
        _apply_delay(record, props)
        return record

    def _batch_records(
        self,
        request: RemotingCommand,
        header: SendMessageRequestHeader,
        queue_id: int,
        sys_flag: int,
        ctx: RequestContext,
    ) -> list[Inner]:
        broker = ctx.broker
        if header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            raise _illegal(f"Batch request does not support retry group {header.topic}")
        body = request.body or b""
        max_size = broker.config.store.max_message_size
        if sys_flag & COMPRESSED_FLAG:
            # The C++ client compresses a whole batch body of 4 KiB or more; the records are
            # stored uncompressed, each with its own CRC, so the flag goes with the wrapper.
            body = decompress_body(body, sys_flag, max_length=max_size + 1)
            sys_flag &= ~(COMPRESSED_FLAG | COMPRESSION_TYPE_MASK)
        if len(body) > max_size:
            raise _illegal(f"batch body of {len(body)} bytes exceeds max_message_size {max_size}")
        batch_props = decode_properties(header.properties)
        if get_transaction_value(sys_flag) != TRANSACTION_NOT_TYPE or _delay_level(batch_props) > 0:
            raise _illegal("batch messages may not be transactional or delayed")
        batch_props[_MC.CLUSTER] = broker.config.broker_cluster_name
        wait_text = batch_props.get(_MC.WAIT_STORE_MSG_OK)
        batch_string = encode_properties(batch_props)
        if len(batch_string) > MAX_PROPERTIES_LENGTH:
            raise _illegal(f"batch properties of {len(batch_string)} characters exceed 32767")
        records = []
        for index, entry in enumerate(decode_batch_body(body)):
            # Own pairs, then the batch's (they win), re-encoded: no pair without its \x01.
            own = decode_properties(entry.properties)
            pairs = {**own, **batch_props}
            check_property_pairs(pairs, f"batch message {index}: ")
            merged = encode_properties(pairs)
            if "\x00" in merged:
                raise _illegal(f"batch message {index}: {NUL_REMARK}")
            if len(merged.encode("utf-8", "replace")) > MAX_PROPERTIES_LENGTH:
                raise _illegal(f"batch message {index} has properties over 32767 bytes")
            tags = own.get(_MC.TAGS)
            records.append(
                Inner(
                    topic=header.topic,
                    queue_id=queue_id,
                    body=entry.body,
                    properties_string=merged,
                    sys_flag=sys_flag,
                    flag=entry.flag,
                    born_timestamp=header.born_timestamp,
                    born_host=ctx.remote,
                    store_host=broker.store_host,
                    reconsume_times=header.reconsume_times or 0,
                    wait_store_msg_ok=wait_text is None or wait_text.lower() == "true",
                    tags_code=java_string_hash(tags) if tags else 0,
                )
            )
        return records

    def _observe(
        self,
        ctx: RequestContext,
        topic: str,
        status: PutMessageStatus,
        records: list[Inner],
        started: float,
    ) -> None:
        # Slow puts are logged by the store, which knows where the time went.
        metrics = ctx.broker.metrics
        if metrics is not None:
            elapsed = trio.current_time() - started
            if len(records) == 1:
                body_bytes = len(records[0].body)
            else:
                body_bytes = sum(len(r.body) for r in records)
            metrics.record_put(
                topic, _STATUS_NAMES[status], body_bytes, elapsed, messages=len(records)
            )
            busy_reason = _BUSY_REASONS.get(status)
            if busy_reason is not None:
                metrics.record_system_busy(busy_reason)


#: Enum's `name` is a Python-level property; the send path reads it for every put
_STATUS_NAMES: Final = {member: member.name for member in PutMessageStatus}
#: statuses that mean flow control (the writer is full or stuck), by busy-counter reason
_BUSY_REASONS: Final = {
    PutMessageStatus.WRITER_QUEUE_FULL: "writer_queue_full",
    PutMessageStatus.OS_PAGE_CACHE_BUSY: "os_page_cache_busy",
}


def _delay_level(props: dict[str, str]) -> int:
    text = props.get(_MC.DELAY_TIME_LEVEL)
    if text is None:
        return 0
    try:
        return int(text)
    except ValueError:
        raise _illegal(f"the DELAY property is not an integer: {text!r}") from None


def _to_half_message(record: Inner, props: dict[str, str]) -> None:
    """A prepared transactional message is parked in RMQ_SYS_TRANS_HALF_TOPIC queue 0."""
    props[_MC.REAL_TOPIC] = record.topic
    props[_MC.REAL_QUEUE_ID] = str(record.queue_id)
    record.sys_flag = reset_transaction_value(record.sys_flag, TRANSACTION_NOT_TYPE)
    record.topic = TRANS_HALF_TOPIC
    record.queue_id = 0
    record.properties_string = encode_properties(props)


def _apply_delay(record: Inner, props: dict[str, str]) -> None:
    """DELAY > 0 on a NOT/COMMIT message: park it in SCHEDULE_TOPIC_XXXX, queue level - 1."""
    if get_transaction_value(record.sys_flag) not in (
        TRANSACTION_NOT_TYPE,
        TRANSACTION_COMMIT_TYPE,
    ):
        return
    level = _delay_level(props)
    if level <= 0:
        return
    level = min(level, SCHEDULE_DELAY_LEVELS)
    props[_MC.DELAY_TIME_LEVEL] = str(level)
    props[_MC.REAL_TOPIC] = record.topic
    props[_MC.REAL_QUEUE_ID] = str(record.queue_id)
    record.topic = SCHEDULE_TOPIC
    record.queue_id = level - 1
    record.properties_string = encode_properties(props)
