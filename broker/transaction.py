"""Transactions as RocketMQ 4.9 runs them: END_TRANSACTION and the check of forgotten halves.

A prepared message is stored in `RMQ_SYS_TRANS_HALF_TOPIC` queue 0 (the send path's rewrite,
its real topic and queue in REAL_TOPIC / REAL_QID). END_TRANSACTION commits it (the message is
stored again under its real topic and queue, COMMIT type, its PREPAREDTRANSACTIONOFFSET the
half's commit-log offset) or rolls it back (nothing visible is stored); either way an op message
in `RMQ_SYS_TRANS_OP_HALF_TOPIC` queue 0, tag `d`, body the half's queue offset, marks it done.

The check (every `transaction_check_interval`) reads the op queue into the set of done offsets,
then walks the half queue from its progress offset: a half neither done nor younger than
`transaction_time_out` is stored again at the end of the half queue with TRANSACTION_CHECK_TIMES
one higher and TRAN_PREPARED_QUEUE_OFFSET naming the first half, and CHECK_TRANSACTION_STATE
for that copy goes to one live producer of its group, whose END_TRANSACTION then ends it. Past
`transaction_check_max` checks a half is given up into `TRANS_CHECK_MAX_TIME_TOPIC`. Progress
of both queues is kept as the offsets of group `CID_RMQ_SYS_TRANS` (config/consumerOffset.json),
so all of it survives a restart: half and op queues are ordinary stored topics.

Stricter than 4.9, which looks up whatever the commit-log offset points at and commits a half
twice when asked twice: the record must be a half in the half topic with the request's queue
offset and producer group, and a half (or any copy of it) already ended is not ended again,
so a producer's retried END_TRANSACTION or a late check answer never stores a duplicate.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

import structlog
import trio

from broker.responses import STORED
from broker.rewrites import from_half_message, stored_again
from broker.topic_config import TRANS_HALF_TOPIC
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.properties import MessageConst, decode_properties, encode_properties
from protocol.transaction_headers import CheckTransactionStateRequestHeader
from store.decode import CommitLogRecord, RecordFormatError, decode_record
from store.message import (
    TRANSACTION_COMMIT_TYPE,
    MessageExtBrokerInner,
    encode_host,
    offset_msg_id,
    reset_transaction_value,
)

if TYPE_CHECKING:
    from broker.context import BrokerContext

OP_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
SYS_GROUP: Final = "CID_RMQ_SYS_TRANS"
REMOVE_TAG: Final = "d"
#: half messages looked at in one check round at most
MAX_SCAN: Final = 20_000
_MC = MessageConst

log = structlog.get_logger()


class EndError(Exception):
    """END_TRANSACTION refused: `code` and a remark for the producer."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code


def identity(record: CommitLogRecord, props: dict[str, str]) -> int:
    """The queue offset of the first half of a transaction (copies name it)."""
    text = props.get(_MC.TRANSACTION_PREPARED_QUEUE_OFFSET, "")
    return int(text) if text.isdigit() else record.queue_offset


class TransactionService:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        #: ended half queue offset -> the queue offset of its op message
        self.ops: dict[int, int] = {}
        #: every half whose first half lies below this is ended (`scan` computes it)
        self.floor = 0
        self.lock = trio.Lock()  # one END_TRANSACTION or check at a time
        self._op_read = -1  # next op queue offset to read; -1 until the first scan

    # -- END_TRANSACTION -------------------------------------------------------------------

    async def half(self, commit_log_offset: int, queue_offset: int, group: str) -> CommitLogRecord:
        """The half message the producer names, checked as the module says."""
        consume = self.broker.consume
        record = None
        if consume is not None:
            size = self.broker.config.store.max_message_size
            record = await consume.look_message_by_offset(commit_log_offset, size)
        if record is None or record.topic != TRANS_HALF_TOPIC or record.body is None:
            raise EndError(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
        props = decode_properties(record.properties)
        if props.get(_MC.PRODUCER_GROUP) != group:
            raise EndError(ResponseCode.SYSTEM_ERROR, "The producer group wrong")
        if record.queue_offset != queue_offset:
            raise EndError(ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong")
        return record

    def ended(self, record: CommitLogRecord) -> bool:
        first = identity(record, decode_properties(record.properties))
        return record.queue_offset in self.ops or first in self.ops or first < self.floor

    async def commit(self, record: CommitLogRecord) -> None:
        """Store the half under its real topic and queue, then mark it done."""
        props = decode_properties(record.properties)
        real = from_half_message(props)
        if real is None:
            raise EndError(ResponseCode.SYSTEM_ERROR, "the half message has no real topic")
        message = self._again(record, props, *real)
        message.sys_flag = reset_transaction_value(record.sys_flag, TRANSACTION_COMMIT_TYPE)
        message.prepared_transaction_offset = record.physical_offset
        result = await self.broker.store.put_message(message)
        if result.status not in STORED:
            raise EndError(
                ResponseCode.SYSTEM_ERROR, f"storing the message failed: {result.status.name}"
            )
        await self.mark_done(record)

    def _again(
        self, record: CommitLogRecord, props: dict[str, str], topic: str, queue_id: int = 0
    ) -> MessageExtBrokerInner:
        """`record` with `props`, to be stored again under `topic`."""
        host = self.broker.store_host
        return stored_again(
            record, props, topic, queue_id, store_host=host, reconsume_times=record.reconsume_times
        )

    async def mark_done(self, record: CommitLogRecord) -> None:
        """Write the op messages that end `record` (and its first half, when a copy)."""
        first = identity(record, decode_properties(record.properties))
        for offset in sorted({record.queue_offset, first}):
            op = MessageExtBrokerInner(
                topic=OP_TOPIC,
                queue_id=0,
                body=str(offset).encode(),
                properties_string=encode_properties({_MC.TAGS: REMOVE_TAG, "WAIT": "false"}),
                store_host=self.broker.store_host,
                born_timestamp=record.born_timestamp,
                born_host=record.born_host,
                wait_store_msg_ok=False,
            )
            result = await self.broker.store.put_message(op)
            if result.status not in STORED or result.append_result is None:
                raise EndError(
                    ResponseCode.SYSTEM_ERROR, f"storing the op failed: {result.status.name}"
                )
            self.ops.setdefault(offset, result.append_result.logics_offset)

    # -- the check ---------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """A first scan (no check) learns what is ended before any END_TRANSACTION is taken;
        then a check round every `transaction_check_interval`."""
        async with self.lock:
            await self.scan(check=False)
        task_status.started()
        while True:
            await trio.sleep(self.broker.config.transaction_check_interval / 1000)
            try:
                async with self.lock:
                    await self.scan(check=True)
            except Exception:
                log.exception("transaction_check_failed")

    def _records(self, topic: str, offset: int) -> list[CommitLogRecord]:
        consume = self.broker.consume
        if consume is None:
            return []
        records = []
        for data in consume.get_message(topic, 0, offset, 32).messages:
            try:
                records.append(decode_record(data, 0, verify_crc=False))
            except RecordFormatError:
                continue
        return records

    def _read_ops(self) -> None:
        if self._op_read < 0:
            self._op_read = self.broker.offsets.query(SYS_GROUP, OP_TOPIC, 0) or 0
        while records := self._records(OP_TOPIC, self._op_read):
            for record in records:
                text = (record.body or b"").decode(errors="replace")
                if text.isdigit():
                    self.ops.setdefault(int(text), record.queue_offset)
                self._op_read = record.queue_offset + 1

    async def scan(self, *, check: bool, now_ms: int | None = None) -> int:
        """Read the op queue, walk the half queue; with `check`, check the halves older than
        `transaction_time_out`. Moves the progress offsets and `floor`; how many were checked."""
        self._read_ops()
        offsets = self.broker.offsets
        start = offsets.query(SYS_GROUP, TRANS_HALF_TOPIC, 0) or 0
        if self.broker.consume is not None:
            start = max(start, self.broker.consume.min_offset_in_queue(TRANS_HALF_TOPIC, 0))
        now = int(time.time() * 1000) if now_ms is None else now_ms
        position = progress = start
        open_first: int | None = None  # the lowest first half still open
        checked = 0
        while position - start < MAX_SCAN and (
            records := self._records(TRANS_HALF_TOPIC, position)
        ):
            for record in records:
                position = record.queue_offset + 1
                if self.ended(record):
                    progress = position if progress == record.queue_offset else progress
                    continue
                first = identity(record, decode_properties(record.properties))
                open_first = first if open_first is None else min(open_first, first)
                young = now - record.store_timestamp < self.broker.config.transaction_time_out
                if check and not young:
                    await self._check(record)  # it lives on as a copy at the end of the queue
                    checked += 1
                    progress = position if progress == record.queue_offset else progress
        if position - start < MAX_SCAN:  # the whole queue was seen
            self.floor = max(
                self.floor, min(progress, open_first if open_first is not None else progress)
            )
            for half in [h for h in self.ops if h < self.floor]:
                del self.ops[half]
        offsets.commit(SYS_GROUP, TRANS_HALF_TOPIC, 0, progress)
        offsets.commit(SYS_GROUP, OP_TOPIC, 0, min(self.ops.values(), default=self._op_read))
        return checked

    async def _check(self, record: CommitLogRecord) -> None:
        props = decode_properties(record.properties)
        times_text = props.get(_MC.TRANSACTION_CHECK_TIMES, "0")
        times = int(times_text) if times_text.isdigit() else 0
        if times >= self.broker.config.transaction_check_max:
            await self._discard(record, props)
            return
        props[_MC.TRANSACTION_CHECK_TIMES] = str(times + 1)
        props[_MC.TRANSACTION_PREPARED_QUEUE_OFFSET] = str(identity(record, props))
        result = await self.broker.store.put_message(self._again(record, props, TRANS_HALF_TOPIC))
        appended = result.append_result
        if result.status not in STORED or appended is None:
            log.warning("transaction_check_put_failed", status=result.status.name)
            return
        group = props.get(_MC.PRODUCER_GROUP, "")
        uniq = props.get(_MC.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        offset_id = offset_msg_id(encode_host(self.broker.store_host)[0], appended.wrote_offset)
        header = CheckTransactionStateRequestHeader(
            appended.logics_offset, appended.wrote_offset, uniq, uniq, offset_id
        )
        consume = self.broker.consume
        body = consume.read_bytes(appended.wrote_offset, appended.wrote_bytes) if consume else None
        command = RemotingCommand.request(
            RequestCode.CHECK_TRANSACTION_STATE, header.to_ext_fields(), body, oneway=True
        )
        channel = self.broker.producers.push_to_one(group, command)
        log.info(
            "transaction_checked",
            group=group,
            half_offset=appended.logics_offset,
            check_times=times + 1,
            producer=None if channel is None else channel.remote,
        )

    async def _discard(self, record: CommitLogRecord, props: dict[str, str]) -> None:
        await self.broker.store.put_message(self._again(record, props, CHECK_MAX_TOPIC))
        await self.mark_done(record)
        log.warning(
            "transaction_discarded",
            group=props.get(_MC.PRODUCER_GROUP),
            half_offset=record.queue_offset,
            check_times=props.get(_MC.TRANSACTION_CHECK_TIMES),
        )
