"""The revive side of pop consumption: what was in flight comes back after a restart, and what
was not acknowledged in time is handed out again.

`replay` runs once at startup: it reads each revive queue from the revive group's committed
offset to its end (checkpoints and acks, `records`), rebuilding the checkpoints still in
flight, and moves each group's pop offset past every offset a checkpoint handed out (the
offsets file may be older than the log after a kill -9). `revive_due`, every `ROUND_S`, takes
each checkpoint whose invisible time has passed and stores its unacknowledged messages again:
in the group's pop retry topic with one more reconsume time, or in `%DLQ%<group>` once their
reconsume times reached the group's `retryMaxTimes`. Then the revive group's offset of each
revive queue moves to its oldest checkpoint still in flight, so a restart replays no less
than it must; a message revived just before a kill -9 may be revived twice (at least once).

`forward_to_dead_letter` is RocketMQ 5's ForwardMessageToDeadLetterQueue: a push consumer
decided the message failed too often, so it is stored in `%DLQ%<group>` with one more
reconsume time and acknowledged, never revived; a receipt handle with nothing in flight under
it is refused NO_MESSAGE, as a change of invisible time is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import structlog
import trio

from broker.pop.checks import parse_receipt, refuse
from broker.pop.receipt import POP_RETRY_QUEUE_NUMS, pop_retry_topic
from broker.pop.records import (
    FIRST_POP_TIME,
    REVIVE_GROUP,
    AckRecord,
    CheckPoint,
    RecordError,
    parse_revive_record,
)
from broker.responses import STORED
from broker.rewrites import dead_letter_topic, past_retry_limit, send_back_topic, stored_again
from broker.topic_config import RETRY_GROUP_TOPIC_PREFIX
from protocol.codes import ResponseCode
from protocol.errors import HeaderFieldError
from protocol.properties import MessageConst, decode_properties
from store.decode import decode_copied_records
from store.get_message import GetMessageStatus

if TYPE_CHECKING:
    from broker.pop.service import PopService
    from store.decode import CommitLogRecord

log = structlog.get_logger()

ROUND_S: Final = 0.2
BATCH: Final = 64


class Reviver:
    def __init__(self, service: PopService) -> None:
        self.service = service
        self.broker = service.broker

    def replay(self) -> int:
        """Rebuild the checkpoints in flight from the revive topic; how many there are."""
        consume = self.broker.consume
        assert consume is not None
        topic = self.broker.topics.find(self.service.revive_topic)
        inflight = self.service.inflight
        if topic is None:
            return 0  # no pop yet: no checkpoint
        for qid in range(topic.read_queue_nums):
            offset = self.broker.offsets.query(REVIVE_GROUP, topic.topic_name, qid) or 0
            offset = max(offset, consume.min_offset_in_queue(topic.topic_name, qid))
            while True:
                found = consume.get_message(topic.topic_name, qid, offset, BATCH)
                if not found.messages:
                    if found.status is GetMessageStatus.MESSAGE_WAS_REMOVING:
                        offset = found.next_begin_offset
                        continue
                    break
                for data in found.messages:
                    for record in decode_copied_records(data):
                        self._apply(record, inflight)
                offset = found.next_begin_offset
        log.info("pop_replayed", revive_topic=topic.topic_name, inflight=len(inflight))
        return len(inflight)

    def _apply(
        self, record: CommitLogRecord, inflight: dict[tuple[str, str, int, int, int], CheckPoint]
    ) -> None:
        try:
            parsed = parse_revive_record(record)
        except RecordError as exc:
            log.warning("pop_revive_record_skipped", offset=record.queue_offset, error=str(exc))
            return
        if isinstance(parsed, AckRecord):
            ck = inflight.get(parsed.ck_key)
            if ck is not None:
                ck.acked.add(parsed.ack_offset)
                if not ck.unacked():
                    del inflight[ck.key]
            return
        parsed.revive_offset = record.queue_offset
        inflight[parsed.key] = parsed
        if parsed.diffs:
            self.broker.offsets.commit(
                parsed.group,
                parsed.topic,
                parsed.queue_id,
                parsed.offsets[-1] + 1,
                forward_only=True,
            )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self.revive_due(self.broker.store.now_ms())
            await trio.sleep(ROUND_S)

    async def revive_due(self, now_ms: int) -> int:
        """Revive every checkpoint due at `now_ms`; how many messages were stored again."""
        due = [ck for ck in self.service.inflight.values() if ck.revive_time <= now_ms]
        revived = 0
        for ck in sorted(due, key=lambda c: c.revive_offset):
            if ck.order:
                revived += await self._revive_order(ck)
                continue
            done = True
            for offset in ck.unacked():
                if await self._revive_one(ck, offset):
                    ck.acked.add(offset)  # handed on: the stored copy is what is in flight now
                    revived += 1
                else:
                    done = False
            if done:
                self.service.inflight.pop(ck.key, None)
        self._commit_revive_offsets()
        return revived

    async def _revive_order(self, ck: CheckPoint) -> int:
        """A FIFO checkpoint is due: its queue is read again from the first message not
        acknowledged, which is handed out once more, or, handed out `retryMaxTimes` times
        already, goes to the DLQ, and the next one is tried."""
        group = self.broker.groups.find(ck.group)
        max_times = group.retry_max_times if group is not None else 16
        attempts = self.service.order_attempts
        rewind = None
        for offset in ck.unacked():
            key = (ck.group, ck.topic, ck.queue_id, offset)
            count = attempts.get(key, 0) + 1
            if count <= max_times:
                attempts[key] = count
                rewind = offset
                break
            if not await self._revive_one(ck, offset, force_dead=True):
                return 0  # the DLQ refused it for now: tried again next round
            attempts.pop(key, None)
        self.service.inflight.pop(ck.key, None)
        if rewind is not None:
            self.broker.offsets.commit(ck.group, ck.topic, ck.queue_id, rewind)
            log.info(
                "pop_order_rewound",
                group=ck.group,
                topic=ck.topic,
                queue=ck.queue_id,
                offset=rewind,
            )
        return 1 if rewind is not None else 0

    def _commit_revive_offsets(self) -> None:
        consume = self.broker.consume
        assert consume is not None
        topic = self.service.revive_topic
        oldest: dict[int, int] = {}
        for ck in self.service.inflight.values():
            if ck.revive_offset < oldest.get(ck.revive_qid, 1 << 62):
                oldest[ck.revive_qid] = ck.revive_offset
        config = self.broker.topics.find(topic)
        for qid in range(config.read_queue_nums if config is not None else 0):
            offset = oldest.get(qid, consume.max_offset_in_queue(topic, qid))
            self.broker.offsets.commit(REVIVE_GROUP, topic, qid, offset, forward_only=True)

    async def _revive_one(self, ck: CheckPoint, offset: int, *, force_dead: bool = False) -> bool:
        """Store message `offset` of `ck` again; False when the store refused it for now."""
        consume = self.broker.consume
        assert consume is not None
        found = consume.get_message(ck.topic, ck.queue_id, offset, 1)
        records = [r for data in found.messages for r in decode_copied_records(data)]
        if not records or records[0].queue_offset != offset:
            log.warning("pop_revive_message_gone", topic=ck.topic, queue=ck.queue_id, offset=offset)
            return True
        record = records[0]
        group = self.broker.groups.find(ck.group)
        max_times = group.retry_max_times if group is not None else 16
        props = decode_properties(record.properties)
        props.pop(MessageConst.DELAY_TIME_LEVEL, None)
        props.setdefault(FIRST_POP_TIME, str(ck.pop_time))
        normal = _normal_topic(ck.topic, ck.group)
        if not ck.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            props.setdefault(MessageConst.RETRY_TOPIC, ck.topic)
        dead = force_dead or past_retry_limit(record.reconsume_times, max_times, 0, None)
        topics = self.broker.topics
        try:
            if not dead:
                try:
                    target, created = send_back_topic(
                        topics, pop_retry_topic(normal, ck.group), POP_RETRY_QUEUE_NUMS
                    )
                except HeaderFieldError:
                    dead = True  # no such retry topic can exist (too long a name): the DLQ
            if dead:
                target, created = dead_letter_topic(topics, ck.group)
        except HeaderFieldError as exc:
            log.warning("pop_revive_dropped", topic=ck.topic, offset=offset, reason=str(exc))
            return True
        if created:
            await topics.persist()
        message = stored_again(
            record,
            props,
            target.topic_name,
            0,
            store_host=self.broker.store_host,
            reconsume_times=record.reconsume_times + 1,
        )
        result = await self.broker.store.put_message(message)
        if result.status not in STORED:
            log.warning("pop_revive_failed", topic=ck.topic, offset=offset, status=result.status)
            return False
        log.info(
            "pop_message_dead_lettered" if dead else "pop_message_revived",
            group=ck.group,
            topic=ck.topic,
            queue=ck.queue_id,
            offset=offset,
            reconsume_times=record.reconsume_times + 1,
        )
        return True


def _normal_topic(topic: str, group: str) -> str:
    prefix = pop_retry_topic("", group)
    return topic[len(prefix) :] if topic.startswith(prefix) else topic


async def forward_to_dead_letter(service: PopService, group: str, topic: str, extra: str) -> str:
    """Store the message `extra` names in the group's DLQ and acknowledge it; the DLQ's name."""
    broker = service.broker
    consume = broker.consume
    assert consume is not None
    receipt = parse_receipt(extra)
    real = receipt.real_topic(topic, group)
    service.check_topic(topic, -1)
    key = (group, real, receipt.queue_id, receipt.ck_offset, receipt.pop_time)
    ck = service.inflight.get(key)
    if ck is None or receipt.queue_offset not in ck.unacked():
        raise refuse(
            ResponseCode.NO_MESSAGE,
            f"no message in flight for this receipt handle (offset {receipt.queue_offset}): "
            "acknowledged or visible again",
            "extraInfo",
        )
    found = consume.get_message(real, receipt.queue_id, receipt.queue_offset, 1)
    records = [r for data in found.messages for r in decode_copied_records(data)]
    if not records or records[0].queue_offset != receipt.queue_offset:
        raise refuse(
            ResponseCode.NO_MESSAGE,
            f"message {receipt.queue_offset} of {real} queue {receipt.queue_id} is gone",
            "extraInfo",
        )
    record = records[0]
    props = decode_properties(record.properties)
    props.pop(MessageConst.DELAY_TIME_LEVEL, None)
    props.setdefault(MessageConst.RETRY_TOPIC, topic)
    target, created = dead_letter_topic(broker.topics, group)
    if created:
        await broker.topics.persist()
    message = stored_again(
        record,
        props,
        target.topic_name,
        0,
        store_host=broker.store_host,
        reconsume_times=record.reconsume_times + 1,
    )
    result = await broker.store.put_message(message)
    if result.status not in STORED:
        raise refuse(
            ResponseCode.SYSTEM_ERROR, f"the dead letter queue refused the message: {result.status}"
        )
    await service.ack(group, topic, receipt.queue_id, receipt.queue_offset, extra)
    log.info(
        "pop_message_dead_lettered",
        group=group,
        topic=real,
        queue=receipt.queue_id,
        offset=receipt.queue_offset,
        by="consumer",
    )
    return target.topic_name
