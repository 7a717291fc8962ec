"""`SendMessageProcessor`: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320).

The broker half of the send path (spec: send-path.md sections 2, 5 and 6): parse the V1/V2
header, run the checks (`send_checks`), build finished `MessageExtBrokerInner` records (peer as
born host, broker_ip1:port as store host, CLUSTER added, WAIT stripped, half-message, delay and
retry/DLQ rewrites of `broker.rewrites`, client-side batches split into records), hand them to
the store and map its outcome through `responses.PUT_RESULT_TO_RESPONSE`. The header's batch
flag, not the request code, selects the batch path ("1" counts as true: the C++ client sends
it). Every response, success or failure, carries MSG_REGION and TRACE_ON.
"""

from __future__ import annotations

import random
import time
from typing import Final

import structlog
import trio

from broker.processors import RequestContext, Respond
from broker.processors.send_checks import (
    check_allowed,
    check_broker_accepts,
    check_property_pairs,
    check_queue_id,
    check_topic_name,
    find_or_create_topic,
    retry_or_dlq,
)
from broker.responses import BUSY_REASONS, SEND_OK_STATUSES, STATUS_NAMES, put_result_response
from broker.rewrites import apply_delay, delay_level, drop_delay, to_half_message
from broker.topic_config import RETRY_GROUP_TOPIC_PREFIX, TopicConfig
from protocol.batch import decode_batch_body
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand
from protocol.compression import COMPRESSED_FLAG, COMPRESSION_TYPE_MASK, decompress_body
from protocol.errors import HeaderFieldError
from protocol.headers import SendMessageRequestHeader, decode_send_header
from protocol.properties import MessageConst, decode_properties, encode_properties
from store.message import (
    MULTI_TAGS_FLAG,
    TRANSACTION_NOT_TYPE,
    PutMessageResult,
    get_transaction_value,
    java_string_hash,
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
    back). Both run the one preparation (`_prepare`: the checks and the records) and build the
    same responses; `submit` declines the requests that may create a topic or group (its table
    is persisted with an await), `process` awaits that persistence and the store.
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
        started = trio.current_time()
        broker = ctx.broker
        topics, groups = broker.topics.data_version, broker.groups.data_version
        topics_before, groups_before = topics.counter, groups.counter
        try:
            prepared = self._prepare(request, ctx, may_create=True)
        except HeaderFieldError as exc:
            return request.make_response(exc.response_code, str(exc), ext_fields=ext)
        finally:
            # What the preparation created is persisted, refused or not, before a message that
            # needs it is stored.
            if topics.counter != topics_before:
                await broker.topics.persist()
            if groups.counter != groups_before:
                await broker.groups.persist()
        assert prepared is not None  # may_create: never declined
        header, queue_id, records = prepared
        if header.batch:
            result = await broker.store.put_messages(records)
        else:
            result = await broker.store.put_message(records[0])
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
            prepared = self._prepare(request, ctx, may_create=False)
        except HeaderFieldError as exc:
            respond(request, request.make_response(exc.response_code, str(exc), ext_fields=ext))
            return True
        if prepared is None:
            return False
        header, queue_id, records = prepared

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

    def _prepare(
        self, request: RemotingCommand, ctx: RequestContext, *, may_create: bool
    ) -> tuple[SendMessageRequestHeader, int, list[Inner]] | None:
        """The header, the queue id answered and the records to store, after every check, in
        RocketMQ's order (`HeaderFieldError` when one fails). With `may_create`, an unknown
        topic, retry group or dead-letter topic is created in memory (the caller persists
        the tables); without it, None for a request that might need one."""
        broker = ctx.broker
        header = decode_send_header(request.code, request.ext_fields)
        check_broker_accepts(header.topic, broker, int(time.time() * 1000))
        check_topic_name(header.topic)
        check_allowed(header.topic)
        if may_create:
            topic_config = find_or_create_topic(header, broker)
        else:
            found = broker.topics.find(header.topic)
            if found is None or header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                return None
            topic_config = found
        queue_id, sys_flag = self._queue_and_flag(header, topic_config, ctx)
        if header.batch:
            return header, queue_id, self._batch_records(request, header, queue_id, sys_flag, ctx)
        if may_create:  # (without it, no %RETRY% topic comes this far)
            topic, store_queue_id, dead_letter = retry_or_dlq(
                header, queue_id, request.version, broker
            )
        else:
            topic, store_queue_id, dead_letter = header.topic, queue_id, False
        record = self._single_record(
            request,
            header,
            sys_flag,
            ctx,
            topic=topic,
            queue_id=store_queue_id,
            dead_letter=dead_letter,
        )
        return header, queue_id, [record]

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
        sys_flag: int,
        ctx: RequestContext,
        *,
        topic: str,
        queue_id: int,
        dead_letter: bool,
    ) -> Inner:
        broker = ctx.broker
        if header.properties and "\x00" in header.properties:
            raise _illegal(NUL_REMARK)
        props = decode_properties(header.properties)
        check_property_pairs(props)
        if dead_letter:
            drop_delay(props)
        props[_MC.CLUSTER] = broker.config.broker_cluster_name
        wait_text = props.pop(_MC.WAIT_STORE_MSG_OK, None)
        properties_string = encode_properties(props)
        if wait_text is not None:
            props[_MC.WAIT_STORE_MSG_OK] = wait_text  # kept for rebuilds below, as upstream does
        record = Inner(
            topic=topic,
            queue_id=queue_id,
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
            to_half_message(record, props)
        apply_delay(record, props, broker.delay_levels_ms)
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
        if get_transaction_value(sys_flag) != TRANSACTION_NOT_TYPE or delay_level(batch_props) > 0:
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
                topic, STATUS_NAMES[status], body_bytes, elapsed, messages=len(records)
            )
            busy_reason = BUSY_REASONS.get(status)
            if busy_reason is not None:
                metrics.record_system_busy(busy_reason)
