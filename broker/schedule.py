"""`ScheduleMessageService`: delayed messages delivered to their topic when their time comes.

A message sent with a delay level (DELAY property; consumers' retries use it too) is stored in
`SCHEDULE_TOPIC_XXXX`, queue `level - 1`, with its real topic and queue in REAL_TOPIC and
REAL_QID. This service follows each level's queue in order (one delay per queue, so its
messages fall due in order): a message whose store time plus the level's delay has passed is
put again under its real topic and queue without the DELAY property, and the level's offset
moves past it. The offsets are kept in `config/delayOffset.json` in RocketMQ's shape, so a
restart neither loses nor re-delivers more than the messages after the last save.
The levels are the broker's `message_delay_level` (RocketMQ's default: 1s 5s 10s 30s 1m ... 2h);
the rewrites in and out of the schedule topic are `broker.rewrites`'.

A due message the store refuses for a while (disk full, busy) stays at the head of its level
and is tried again next round. One it can never take as it is (MESSAGE_ILLEGAL: a real topic
over 127 bytes, say) must not hold back every later message of its level, as RocketMQ 4.9's
sync delivery lets it: a retry (real topic `%RETRY%<group>`) goes to `%DLQ%<group>`, anything
else, or a retry its dead-letter topic cannot take either, is dropped with one warning.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Final

import structlog
import trio

from broker.responses import NEVER_STORED, STORED
from broker.rewrites import dead_letter_topic, delivery_record, retry_group
from broker.topic_config import DLQ_GROUP_TOPIC_PREFIX, SCHEDULE_TOPIC, write_json_atomically
from protocol.errors import HeaderFieldError
from store.decode import decode_copied_records
from store.errors import StoreLoadError
from store.get_message import GetMessageStatus
from store.message import MessageExtBrokerInner
from store.status import PutMessageStatus

if TYPE_CHECKING:
    from broker.context import BrokerContext
    from store.decode import CommitLogRecord

log = structlog.get_logger()

OFFSET_FILE: Final = "delayOffset.json"
ROUND_S: Final = 0.1
BATCH: Final = 32


class ScheduleMessageService:
    def __init__(self, broker: BrokerContext, config_dir: Path | None) -> None:
        self.broker = broker
        self.path = config_dir / OFFSET_FILE if config_dir is not None else None
        self.offsets: dict[int, int] = {}  # level -> next logical offset of its queue
        self._saved: dict[int, int] = {}
        self._failing = False

    def load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        try:
            table = json.loads(self.path.read_text(encoding="utf-8"))["offsetTable"]
            self.offsets = {int(level): int(offset) for level, offset in table.items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreLoadError(str(self.path), f"unreadable delay offsets: {exc}") from None
        self._saved = dict(self.offsets)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            while True:
                for level in range(1, len(self.broker.delay_levels_ms) + 1):
                    await self.deliver_due(level, self.broker.store.now_ms())
                await self.save()
                await trio.sleep(ROUND_S)
        finally:
            with trio.CancelScope(shield=True):
                await self.save()

    async def deliver_due(self, level: int, now_ms: int) -> int:
        """Deliver the due messages of one level; how many were delivered."""
        consume = self.broker.consume
        if consume is None:
            return 0
        queue_id = level - 1
        delay_ms = self.broker.delay_levels_ms[level - 1]
        delivered = 0
        start = self.offsets.get(level, 0)
        offset = max(start, consume.min_offset_in_queue(SCHEDULE_TOPIC, queue_id))
        try:
            while True:
                result = consume.get_message(SCHEDULE_TOPIC, queue_id, offset, BATCH)
                if not result.messages:
                    if result.status is not GetMessageStatus.MESSAGE_WAS_REMOVING:
                        break
                    offset = result.next_begin_offset  # retention deleted them: step over
                    continue
                for data in result.messages:
                    [record] = decode_copied_records(data)
                    if record.store_timestamp + delay_ms > now_ms:
                        return delivered
                    if not await self._deliver(level, record):
                        return delivered  # tried again next round
                    delivered += 1
                    offset = record.queue_offset + 1
        finally:
            self.offsets[level] = offset
        return delivered

    async def _deliver(self, level: int, record: CommitLogRecord) -> bool:
        """Put `record` under its real topic; False when the store refused it for now."""
        now_ms = self.broker.store.now_ms()
        message = delivery_record(record, now_ms, self.broker.delay_levels_ms)
        if message is None:
            log.warning("delayed_message_malformed", level=level, offset=record.physical_offset)
            return True  # skipped: it can never be delivered
        result = await self.broker.store.put_message(message)
        if result.status in STORED:
            return True
        if result.status in NEVER_STORED:
            return await self._undeliverable(level, record, message, result.status)
        log.warning("delayed_delivery_failed", level=level, status=result.status.name)
        return False

    async def _undeliverable(
        self,
        level: int,
        record: CommitLogRecord,
        message: MessageExtBrokerInner,
        status: PutMessageStatus,
    ) -> bool:
        """`message` can never be put under its real topic: a retry goes to its group's DLQ,
        anything else is dropped. False only when the DLQ refused it for now."""
        reason = status.name
        group = retry_group(message.topic)
        if group is not None:
            outcome = await self._dead_letter(message, group)
            if outcome in STORED:
                log.warning(
                    "delayed_message_dead_lettered",
                    level=level,
                    offset=record.physical_offset,
                    topic=message.topic,
                    status=status.name,
                )
                return True
            if isinstance(outcome, PutMessageStatus):
                if outcome not in NEVER_STORED:
                    return False
                outcome = outcome.name
            reason = f"{status.name}; {DLQ_GROUP_TOPIC_PREFIX}{group} refused it too: {outcome}"
        log.warning(
            "delayed_message_dropped",
            level=level,
            offset=record.physical_offset,
            topic=message.topic,
            reason=reason,
        )
        return True

    async def _dead_letter(
        self, message: MessageExtBrokerInner, group: str
    ) -> PutMessageStatus | str:
        """Put `message` in `group`'s dead-letter topic: the store's answer, or why the topic
        cannot be created."""
        topics = self.broker.topics
        try:
            dlq, created = dead_letter_topic(topics, group)
        except HeaderFieldError as exc:
            return str(exc)
        if created:
            await topics.persist()
        result = await self.broker.store.put_message(
            dataclasses.replace(message, topic=dlq.topic_name, queue_id=0)
        )
        return result.status

    async def save(self) -> None:
        if self.path is None or self.offsets == self._saved:
            return
        payload = {"offsetTable": {str(k): v for k, v in sorted(self.offsets.items())}}
        try:
            await trio.to_thread.run_sync(write_json_atomically, self.path, payload)
        except OSError as exc:
            if not self._failing:  # one event per failing spell (a full disk)
                self._failing = True
                log.error("delay_offsets_persist_failed", file=str(self.path), error=str(exc))
            return
        self._failing = False
        self._saved = dict(self.offsets)
