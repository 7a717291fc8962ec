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
from typing import Final, cast

import structlog
import trio

from broker.processors import RequestContext, Respond
from broker.processors.send_batch import NUL_REMARK, batch_records, illegal
from broker.processors.send_checks import (
    check_allowed,
    check_broker_accepts,
    check_property_pairs,
    check_queue_id,
    check_topic_name,
    find_or_create_topic,
    retry_or_dlq,
)
from broker.responses import (
    BUSY_REASONS,
    SEND_OK_CODES,
    SEND_OK_STATUSES,
    STATUS_NAMES,
    put_result_response,
)
from broker.rewrites import apply_delay, drop_delay, to_half_message
from broker.topic_config import RETRY_GROUP_TOPIC_PREFIX, TopicConfig
from protocol.codes import ResponseCode, SerializeType
from protocol.command import RemotingCommand
from protocol.errors import HeaderFieldError
from protocol.headers import SendMessageRequestHeader, decode_send_header
from protocol.json_header import encode_json_send_answer, json_send_answer_prefix
from protocol.properties import MessageConst, decode_properties, encode_properties
from store.message import (
    MULTI_TAGS_FLAG,
    PutMessageResult,
    java_string_hash,
)
from store.message import MessageExtBrokerInner as Inner
from store.status import PutMessageStatus

log = structlog.get_logger()
_MC = MessageConst
_JSON: Final = SerializeType.JSON


#: the remark of a send turned away while the store is busy (RocketMQ's wording)
REJECT_REQUEST_REMARK: Final = "[REJECTREQUEST]system busy, start flow control for a while"


def _system_error(request: RemotingCommand, exc: Exception) -> RemotingCommand:
    return request.make_response(ResponseCode.SYSTEM_ERROR, str(exc) or repr(exc))


class SendMessageProcessor:
    """Stateless apart from its random source (used for queueId < 0).

    Two ways in: `process` (a task awaits the store) and `submit_burst` (the sends of one
    receive, no task: one store submission, the store calls back). Both run the one preparation
    (`_prepare`: the checks and the records) and build the same responses; `submit_burst`
    declines the requests that may create a topic or group (its table is persisted with an
    await), `process` awaits that persistence and the store.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._answer_prefixes: dict[tuple[str, str], str | None] = {}

    def _answer_prefix(self, ext: dict[str, str]) -> str | None:
        """`json_send_answer_prefix` of `ext`, encoded once per (region, trace switch)."""
        key = (ext[_MC.MSG_REGION], ext[_MC.TRACE_SWITCH])
        try:
            return self._answer_prefixes[key]
        except KeyError:
            prefix = self._answer_prefixes[key] = json_send_answer_prefix(ext)
            return prefix

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

    def submit_burst(
        self, requests: list[RemotingCommand], ctx: RequestContext, respond: Respond
    ) -> list[RemotingCommand]:
        """The send path without a task, for the sends of one receive: checks and records
        here, one submission to the store for all of them, their responses from one store
        callback. Returns, untouched, the sends of a topic that is not known yet or of a
        `%RETRY%` topic: those may create topics, which `process` persists."""
        ext = self._ext(ctx)
        if ctx.broker.store.is_os_page_cache_busy():
            for request in requests:
                respond(request, cast(RemotingCommand, self._reject_request(request, ctx, ext)))
            return []
        started = trio.current_time()
        declined: list[RemotingCommand] = []
        taken: list[tuple[RemotingCommand, str, int, list[Inner]]] = []
        for request in requests:
            try:
                prepared = self._prepare(request, ctx, may_create=False)
            except HeaderFieldError as exc:
                respond(request, request.make_response(exc.response_code, str(exc), ext_fields=ext))
                continue
            except Exception as error:
                log.exception("processor_failed", code=request.code)
                respond(request, _system_error(request, error))
                continue
            if prepared is None:
                declined.append(request)
            else:
                header, queue_id, records = prepared
                taken.append((request, header.topic, queue_id, records))
        if not taken:
            return declined

        def on_results(results: list[PutMessageResult]) -> None:
            # One clock read and one metrics lookup per callback; a stored message is answered
            # here, anything else through `_response`.
            elapsed = trio.current_time() - started
            metrics = ctx.broker.metrics
            record_put = None if metrics is None else metrics.record_put
            ok_codes = SEND_OK_CODES
            prefix = self._answer_prefix(ext)
            for (request, topic, queue_id, records), result in zip(taken, results, strict=True):
                status, append = result
                code = ok_codes.get(status)
                response: RemotingCommand | bytes
                try:
                    if code is None or append is None:
                        response = self._response(
                            request,
                            ctx,
                            dict(ext),
                            topic=topic,
                            queue_id=queue_id,
                            records=records,
                            result=result,
                            started=started,
                        )
                    else:
                        if record_put is not None:
                            if len(records) == 1:
                                body_bytes = len(records[0].body)
                            else:
                                body_bytes = sum(len(r.body) for r in records)
                            record_put(
                                topic, STATUS_NAMES[status], body_bytes, elapsed, len(records)
                            )
                        msg_ids = append.msg_ids
                        msg_id = msg_ids[0] if len(msg_ids) == 1 else ",".join(msg_ids)
                        if code == 0 and request.serialize_type is _JSON and prefix is not None:
                            response = encode_json_send_answer(
                                prefix, request.opaque, msg_id, queue_id, append.logics_offset
                            )
                        else:
                            answer = dict(ext)
                            answer["msgId"] = msg_id
                            answer["queueId"] = str(queue_id)
                            answer["queueOffset"] = str(append.logics_offset)
                            response = request.make_response(code, None, answer)
                except Exception as exc:
                    log.exception("send_response_failed")
                    response = _system_error(request, exc)
                respond(request, response)

        ctx.broker.store.submit_burst([records for *_, records in taken], on_results)
        return declined

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
            return header, queue_id, batch_records(request, header, queue_id, sys_flag, ctx)
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
            raise illegal(NUL_REMARK)
        props = decode_properties(header.properties)
        check_property_pairs(props)
        if dead_letter:
            drop_delay(props)
        props[_MC.CLUSTER] = broker.config.broker_cluster_name
        wait_text = props.pop(_MC.WAIT_STORE_MSG_OK, None)
        properties_string = encode_properties(props)
        if wait_text is not None:
            props[_MC.WAIT_STORE_MSG_OK] = wait_text  # kept for rebuilds below, as upstream does
        tags = props.get(_MC.TAGS)
        # Positional, in the field order (topic ... tags_code): cheaper than 12 keywords.
        record = Inner(
            topic,
            queue_id,
            request.body or b"",
            properties_string,
            sys_flag,
            header.flag,
            header.born_timestamp,
            ctx.remote,
            broker.store_host,
            header.reconsume_times or 0,
            0,  # prepared_transaction_offset
            wait_text is None or wait_text.lower() == "true",
            0 if tags is None else java_string_hash(tags),
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
