"""`PopService`: RocketMQ 5's pop consumption over the broker's store, for any front end.

A pop hands out up to `max_nums` messages of a topic to a consumer group and hides them for
`invisible_ms`: the group's pop offset of each queue read moves past them at once, and a
checkpoint naming them is stored in the revive topic (`records`). Each message carries its
receipt handle (`receipt`) in the POP_CK property. ACK stores an ack record; changing the
invisible time stores a checkpoint of that one message from now on and acknowledges the old
one, so the message gets a new receipt handle. A message not acknowledged in time is revived
(`revive.Reviver`): stored again in the group's pop retry topic `%RETRY%<group>_<topic>` with
one more reconsume time, which the group's pops read first, or, past the group's
`retryMaxTimes`, in `%DLQ%<group>` as a 4.x send-back does.

Refusals raise `HeaderFieldError` with 5.x's response codes and remarks. Every checkpoint
and ack is a message of its own (no `PopBufferMergeService`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import structlog
import trio

from broker.pop.checks import check_invisible, check_receipt_names, parse_receipt, refuse
from broker.pop.receipt import Receipt, pop_retry_topic, retry_kind
from broker.pop.records import (
    ACK_TAG,
    CK_TAG,
    AckRecord,
    CheckPoint,
    revive_message,
    revive_topic,
    with_pop_ck,
)
from broker.responses import STORED
from broker.topic_config import PERM_READ, PERM_WRITE, TopicConfig
from protocol.codes import ResponseCode
from store.decode import decode_copied_records
from store.get_message import TagFilter

if TYPE_CHECKING:
    from broker.context import BrokerContext

log = structlog.get_logger()

#: messages per pop at most (5.x refuses more than 32)
MAX_POP_NUMS: Final = 32
#: queues of the revive topic (5.x's reviveQueueNum default)
REVIVE_QUEUE_NUM: Final = 8
INIT_MODE_MIN: Final = 0
#: the reviveQid of a FIFO pop's receipt handles (5.x's POP_ORDER_REVIVE_QUEUE)
ORDER_REVIVE_QID: Final = 999


@dataclass(frozen=True, slots=True)
class PopResult:
    messages: list[bytes]
    pop_time: int
    invisible_time: int
    revive_qid: int
    rest_num: int
    #: per queue read: "<retry> <queueId> <startOffset>", ';'-separated (5.x's header fields)
    start_offset_info: str
    msg_offset_info: str
    #: FIFO pops: "<retry> qo<queueId>%<offset> <times handed out before>", ';'-separated
    order_count_info: str = ""


@dataclass(frozen=True, slots=True)
class _Pop:
    group: str
    topic: str
    invisible_ms: int
    now: int
    revive_qid: int
    tag_filter: TagFilter
    init_mode: int
    order: bool


@dataclass(frozen=True, slots=True)
class ChangeResult:
    pop_time: int
    invisible_time: int
    revive_qid: int
    receipt: str


class PopService:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.revive_topic = revive_topic(broker.config.broker_cluster_name)
        #: checkpoints with offsets not acknowledged yet, by (group, topic, queue, start, pop time)
        self.inflight: dict[tuple[str, str, int, int, int], CheckPoint] = {}
        self._revive_qids = itertools.cycle(range(REVIVE_QUEUE_NUM))
        self._queue_rotation = itertools.count()
        #: (group, topic, queue id) -> the lock its pops take turns under
        self._popping: dict[tuple[str, str, int], trio.Lock] = {}
        #: FIFO groups: times a message was handed out and not acknowledged, by
        #: (group, topic, queue, offset); persisted by `broker.pop.order_attempts`
        self.order_attempts: dict[tuple[str, str, int, int], int] = {}

    @property
    def broker_name(self) -> str:
        return self.broker.config.broker_name

    async def ensure_revive_topic(self) -> None:
        """Create the revive topic at the first checkpoint (a system topic: outside the
        auto-creation limits, which count what clients create)."""
        if self.broker.topics.find(self.revive_topic) is None:
            rw = PERM_READ | PERM_WRITE
            self.broker.topics.put(
                TopicConfig(self.revive_topic, REVIVE_QUEUE_NUM, REVIVE_QUEUE_NUM, rw)
            )
            log.info("topic_created", topic=self.revive_topic, queues=REVIVE_QUEUE_NUM)
            await self.broker.topics.persist()

    async def pop(
        self,
        group: str,
        topic: str,
        queue_id: int,
        *,
        max_nums: int,
        invisible_ms: int,
        tag_filter: TagFilter,
        init_mode: int = INIT_MODE_MIN,
        order: bool = False,
    ) -> PopResult:
        """Hand out up to `max_nums` visible messages of `topic` (`queue_id` -1: any queue,
        starting from a different one each time), the group's retried ones first.

        `order` (a FIFO group): a queue with a message of the group in flight hands out
        nothing, and what is not acknowledged in time is handed out again from its queue."""
        check_invisible(invisible_ms)
        if not 1 <= max_nums <= MAX_POP_NUMS:
            raise refuse(
                ResponseCode.INVALID_PARAMETER,
                f"the broker[{self.broker.addr}] pop message's num is {max_nums}, "
                f"not within 1..{MAX_POP_NUMS}",
                "maxMsgNums",
            )
        config = self.check_topic(topic, queue_id)
        now = self.broker.store.now_ms()
        request = _Pop(
            group, topic, invisible_ms, now, next(self._revive_qids), tag_filter, init_mode, order
        )
        out: list[bytes] = []
        starts: list[str] = []
        offsets_info: list[str] = []
        rest = 0
        retry = self.broker.topics.find(pop_retry_topic(topic, group))
        sources: list[tuple[str, int]] = []
        if retry is not None and not order:
            sources += [(retry.topic_name, q) for q in range(retry.read_queue_nums)]
        if queue_id < 0:
            first = next(self._queue_rotation) % max(1, config.read_queue_nums)
            queues = [(first + q) % config.read_queue_nums for q in range(config.read_queue_nums)]
        else:
            queues = [queue_id]
        sources += [(topic, q) for q in queues if not (order and self.order_busy(group, topic, q))]
        counts: list[str] = []
        for real_topic, qid in sources:
            want = max_nums - len(out)
            if want <= 0:
                rest += self._rest(group, real_topic, qid)
                continue
            got = await self._pop_queue(request, real_topic, qid, want)
            if got is None:
                continue
            messages, start, handed, left = got
            rest += left
            out += messages
            kind = retry_kind(real_topic)
            starts.append(f"{kind} {qid} {start}")
            offsets_info.append(f"{kind} {qid} " + ",".join(str(o) for o in handed))
            if order:
                counts += [
                    f"{kind} qo{qid}%{o} {self.order_attempts.get((group, topic, qid, o), 0)}"
                    for o in handed
                ]
        return PopResult(
            out,
            now,
            invisible_ms,
            ORDER_REVIVE_QID if order else request.revive_qid,
            rest,
            ";".join(starts),
            ";".join(offsets_info),
            ";".join(counts),
        )

    def order_busy(self, group: str, topic: str, queue_id: int) -> bool:
        """A FIFO group has a message of this queue in flight."""
        return any(
            ck.order and ck.group == group and ck.topic == topic and ck.queue_id == queue_id
            for ck in self.inflight.values()
        )

    def _rest(self, group: str, topic: str, queue_id: int) -> int:
        consume = self.broker.consume
        assert consume is not None
        offset = self.broker.offsets.query(group, topic, queue_id) or 0
        return max(0, consume.max_offset_in_queue(topic, queue_id) - offset)

    async def _pop_queue(
        self, request: _Pop, real_topic: str, queue_id: int, want: int
    ) -> tuple[list[bytes], int, list[int], int] | None:
        """Up to `want` messages of one queue: (the messages, the first offset read, their
        offsets, how many are left); None when none was there. A group's pops of one queue take
        turns: the offset moves once the checkpoint is stored, not before."""
        key = (request.group, real_topic, queue_id)
        lock = self._popping.setdefault(key, trio.Lock())
        try:
            async with lock:
                return await self._pop_queue_locked(request, real_topic, queue_id, want)
        finally:
            if not lock.locked() and not lock.statistics().tasks_waiting:
                self._popping.pop(key, None)

    async def _pop_queue_locked(
        self, request: _Pop, real_topic: str, queue_id: int, want: int
    ) -> tuple[list[bytes], int, list[int], int] | None:
        consume = self.broker.consume
        assert consume is not None
        offsets = self.broker.offsets
        group = request.group
        offset = offsets.query(group, real_topic, queue_id)
        if offset is None:
            offset = (
                consume.min_offset_in_queue(real_topic, queue_id)
                if request.init_mode == INIT_MODE_MIN or real_topic != request.topic
                else consume.max_offset_in_queue(real_topic, queue_id)
            )
        offset = max(offset, consume.min_offset_in_queue(real_topic, queue_id))
        found = consume.get_message(
            real_topic, queue_id, offset, want, tag_filter=request.tag_filter
        )
        rest = max(0, found.max_offset - found.next_begin_offset)
        if not found.messages:
            if found.next_begin_offset > offset:  # filtered out or removed: step over
                offsets.commit(group, real_topic, queue_id, found.next_begin_offset)
            return None
        records = [r for data in found.messages for r in decode_copied_records(data)]
        handed = [r.queue_offset for r in records]
        ck = CheckPoint(
            group,
            real_topic,
            queue_id,
            offset,
            request.now,
            request.invisible_ms,
            request.revive_qid,
            self.broker_name,
            [o - offset for o in handed],
            order=request.order,
        )
        await self.store_checkpoint(ck)
        offsets.commit(group, real_topic, queue_id, found.next_begin_offset, forward_only=True)
        self.broker.admin.stats.record_get(len(records))
        out = []
        for data, record in zip(found.messages, records, strict=True):
            receipt = Receipt(
                offset,
                request.now,
                request.invisible_ms,
                ORDER_REVIVE_QID if request.order else request.revive_qid,
                retry_kind(real_topic),
                self.broker_name,
                queue_id,
                record.queue_offset,
            )
            out.append(with_pop_ck(data, record, request.topic, receipt.encode()))
        return out, offset, handed, rest

    async def store_checkpoint(self, ck: CheckPoint) -> None:
        """Store `ck` in the revive topic and track it; SYSTEM_ERROR when the store refuses."""
        await self.ensure_revive_topic()
        message = revive_message(
            self.revive_topic, ck.revive_qid, CK_TAG, ck.to_json(), self.broker.store_host
        )
        result = await self.broker.store.put_message(message)
        if result.status not in STORED or result.append_result is None:
            raise refuse(
                ResponseCode.SYSTEM_ERROR, f"the checkpoint could not be stored: {result.status}"
            )
        ck.revive_offset = result.append_result.logics_offset
        self.inflight[ck.key] = ck

    async def ack(self, group: str, topic: str, queue_id: int, offset: int, extra: str) -> None:
        """Acknowledge the message `extra` (its receipt handle) names: it is not revived."""
        receipt = parse_receipt(extra)
        real = receipt.real_topic(topic, group)
        self._check_names(receipt, queue_id, offset, real)
        record = AckRecord(
            group, real, queue_id, receipt.ck_offset, offset, receipt.pop_time, self.broker_name
        )
        ck = self.inflight.get(record.ck_key)
        if ck is None or offset not in ck.offsets or offset in ck.acked:
            return  # revived already, or acknowledged: nothing is in flight under this receipt
        message = revive_message(
            self.revive_topic,
            receipt.revive_qid,
            ACK_TAG,
            record.to_json(),
            self.broker.store_host,
        )
        result = await self.broker.store.put_message(message)
        if result.status not in STORED:
            raise refuse(ResponseCode.SYSTEM_ERROR, f"the ack could not be stored: {result.status}")
        ck.acked.add(offset)
        self.order_attempts.pop((group, real, queue_id, offset), None)
        if not ck.unacked():
            self.inflight.pop(ck.key, None)

    async def change_invisible(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        extra: str,
        *,
        invisible_ms: int,
    ) -> ChangeResult:
        """Hide the message `extra` names for `invisible_ms` from now; its new receipt."""
        check_invisible(invisible_ms, minimum=0)
        receipt = parse_receipt(extra)
        real = receipt.real_topic(topic, group)
        self._check_names(receipt, queue_id, offset, real)
        key = (group, real, queue_id, receipt.ck_offset, receipt.pop_time)
        old = self.inflight.get(key)
        if old is None or offset not in old.unacked():
            raise refuse(
                ResponseCode.NO_MESSAGE,
                f"no message in flight for this receipt handle (offset {offset}): acknowledged "
                "or visible again",
                "extraInfo",
            )
        now = self.broker.store.now_ms()
        revive_qid = next(self._revive_qids)
        ck = CheckPoint(
            group,
            real,
            queue_id,
            offset,
            now,
            invisible_ms,
            revive_qid,
            self.broker_name,
            [0],
            order=old.order,
        )
        await self.store_checkpoint(ck)
        attempts = self.order_attempts.get((group, real, queue_id, offset))
        await self.ack(group, topic, queue_id, offset, extra)
        if attempts is not None:  # the message is still in flight: its count goes on
            self.order_attempts[group, real, queue_id, offset] = attempts
        if old.order:
            revive_qid = ORDER_REVIVE_QID
        new = Receipt(
            offset,
            now,
            invisible_ms,
            revive_qid,
            receipt.retry,
            self.broker_name,
            queue_id,
            offset,
        )
        return ChangeResult(now, invisible_ms, revive_qid, new.encode())

    # -- checks ------------------------------------------------------------------------------

    def check_topic(self, topic: str, queue_id: int) -> TopicConfig:
        config = self.broker.topics.find(topic)
        if config is None:
            raise refuse(
                ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!"
            )
        if not config.perm & PERM_READ:
            raise refuse(
                ResponseCode.NO_PERMISSION, f"the topic[{topic}] peeking message is forbidden"
            )
        if queue_id >= config.read_queue_nums or queue_id < -1:
            raise refuse(
                ResponseCode.INVALID_PARAMETER,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{config.read_queue_nums}]",
                "queueId",
            )
        return config

    def _check_names(self, receipt: Receipt, queue_id: int, offset: int, real: str) -> None:
        check_receipt_names(receipt, queue_id, offset, self.broker_name)
        if self.broker.topics.find(real) is None:
            raise refuse(ResponseCode.TOPIC_NOT_EXIST, f"topic[{real}] not exist")
