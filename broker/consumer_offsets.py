"""`ConsumerOffsetManager`: the committed consume offset of each group, topic and queue.

RocketMQ's `ConsumerOffsetManager`: an in-memory table keyed `topic@group` -> {queueId: offset},
persisted as `config/consumerOffset.json` in RocketMQ's shape (`{"offsetTable": {...}}`),
written atomically (temp file, fsync, rename) every `flush_consumer_offset_interval_ms` when it
changed and once more at shutdown, so committed offsets survive a restart. A commit never moves
an offset backwards through the pull path (a late pull must not undo a newer commit); an explicit
UPDATE_CONSUMER_OFFSET may, as upstream allows (a reset).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

import structlog
import trio

from broker.topic_config import write_json_atomically
from store.errors import StoreLoadError

log = structlog.get_logger()

OFFSET_FILE: Final = "consumerOffset.json"
TOPIC_GROUP_SEPARATOR: Final = "@"


class ConsumerOffsetManager:
    def __init__(self, config_dir: Path | None) -> None:
        self.path = config_dir / OFFSET_FILE if config_dir is not None else None
        self._table: dict[str, dict[int, int]] = {}
        self._dirty = False
        self._failing = False
        self._lock = trio.Lock()
        #: `topic@group` -> messages consumed since start (commits' advance; the admin
        #: state's sampler turns it into GET_CONSUME_STATS' consumeTps)
        self.consumed: dict[str, int] = {}

    def load(self) -> None:
        """Read the persisted table; a missing file is an empty table, a damaged one an error."""
        if self.path is None or not self.path.exists():
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            table = data.get("offsetTable", {}) if isinstance(data, dict) else None
            if not isinstance(table, dict):
                raise ValueError("offsetTable is not an object")
            self._table = {
                str(key): {int(q): int(o) for q, o in queues.items()}
                for key, queues in table.items()
            }
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise StoreLoadError(str(self.path), f"unreadable consumer offsets: {exc}") from None
        log.info("consumer_offsets_loaded", entries=len(self._table))

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._table.get(self.key(topic, group), {}).get(queue_id)

    def commit(
        self, group: str, topic: str, queue_id: int, offset: int, *, forward_only: bool = False
    ) -> None:
        key = self.key(topic, group)
        queues = self._table.setdefault(key, {})
        old = queues.get(queue_id)
        if forward_only and (old if old is not None else -1) >= offset:
            return
        if old != offset:
            queues[queue_id] = offset
            self._dirty = True
            if old is not None and offset > old:
                self.consumed[key] = self.consumed.get(key, 0) + offset - old

    def set_offsets(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Set the group's offsets of `topic` (a reset: backwards allowed, no rate counted)."""
        queues = self._table.setdefault(self.key(topic, group), {})
        for queue_id, offset in offsets.items():
            if queues.get(queue_id) != offset:
                queues[queue_id] = offset
                self._dirty = True

    def topics_of(self, group: str) -> list[str]:
        """The topics `group` has committed offsets of (upstream's whichTopicByConsumer)."""
        suffix = f"{TOPIC_GROUP_SEPARATOR}{group}"
        return sorted(key[: -len(suffix)] for key in self._table if key.endswith(suffix))

    def remove_group(self, group: str) -> int:
        """Forget every offset of `group`; how many topics it had."""
        keys = [self.key(topic, group) for topic in self.topics_of(group)]
        for key in keys:
            del self._table[key]
            self.consumed.pop(key, None)
        self._dirty = self._dirty or bool(keys)
        return len(keys)

    def remove_topic(self, topic: str) -> list[str]:
        """Forget every group's offsets of `topic` (its queues were deleted); the groups."""
        groups = self.groups_of(topic)
        for group in groups:
            key = self.key(topic, group)
            del self._table[key]
            self.consumed.pop(key, None)
        self._dirty = self._dirty or bool(groups)
        return groups

    def table(self) -> dict[str, dict[int, int]]:
        """A copy of the table: `topic@group` -> queue id -> offset."""
        return {key: dict(queues) for key, queues in self._table.items()}

    def groups_of(self, topic: str) -> list[str]:
        prefix = f"{topic}{TOPIC_GROUP_SEPARATOR}"
        return [key[len(prefix) :] for key in self._table if key.startswith(prefix)]

    def group_names(self) -> list[str]:
        """Every group that committed an offset, in name order."""
        return sorted({key.rpartition(TOPIC_GROUP_SEPARATOR)[2] for key in self._table})

    def snapshot(self) -> dict[str, dict[str, int]]:
        """The table as RocketMQ writes it (queue ids as JSON object keys)."""
        return {
            key: {str(q): o for q, o in sorted(queues.items())}
            for key, queues in sorted(self._table.items())
        }

    async def persist(self) -> None:
        """Write the table if it changed; a failure (full disk) is logged once per spell."""
        if self.path is None or not self._dirty:
            return
        async with self._lock:
            self._dirty = False
            payload = {"offsetTable": self.snapshot()}
            try:
                await trio.to_thread.run_sync(write_json_atomically, self.path, payload)
            except OSError as exc:
                self._dirty = True
                if not self._failing:
                    self._failing = True
                    log.error(
                        "consumer_offsets_persist_failed", file=str(self.path), error=str(exc)
                    )
                return
            if self._failing:
                self._failing = False
                log.info("consumer_offsets_persist_recovered", file=str(self.path))

    async def run(
        self, interval_s: float, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Persist every `interval_s` and once more when cancelled (shutdown)."""
        await persist_every(interval_s, self.persist, task_status)


async def persist_every(
    interval_s: float, persist: Callable[[], Awaitable[None]], task_status: trio.TaskStatus[None]
) -> None:
    """Call `persist` every `interval_s` and once more when cancelled (shutdown)."""
    task_status.started()
    try:
        while True:
            await trio.sleep(interval_s)
            await persist()
    finally:
        with trio.CancelScope(shield=True):
            await persist()
