"""Deleted topics: what DELETE_TOPIC_IN_BROKER leaves behind in the store, and how it is kept out.

RocketMQ 4.9 (`DefaultMessageStore.cleanUnusedTopic`) destroys a deleted topic's consume queues
and drops its entries from the commit log's topic-queue table; its records stay in the commit
log. Nothing marks them, and 4.9's dispatch never asks whether a record's topic still exists,
so it brings part of them back: a record not yet dispatched at the delete goes into a new queue;
a start after a clean stop dispatches again from the highest end of the remaining queues, so
the deleted topic's records past it come back; after a crash (`recoverAbnormally`) every record
of the replayed segments is dispatched again, the deleted topic's too, at its old queue offsets
(the queue then starts there, and its next send goes on after them).

Here a delete leaves a mark, `config/deletedTopics.msgpack`: topic -> the commit-log end when it
was deleted (the barrier). Every record of the topic below its barrier was given its queue offset
before the delete; none at or above it was. So the dispatcher, the open-time catch-up and the
recovery scan skip the topic's records below the barrier, and a topic created again starts at
queue offset 0 after a clean stop and a kill -9 alike, its old records unreachable by queue.
The mark is written (fsync, rename) before any file is removed; a queue of a marked topic whose
first unit points below the barrier at open is what a crash in the middle of a delete left, and
is removed then. A mark goes once retention has deleted every segment below its barrier.
"""

from __future__ import annotations

import os
from typing import Final

import msgpack  # type: ignore[import-untyped]
import structlog

from store.checkpoint import atomic_write
from store.mapped_file import make_dirs

log = structlog.get_logger()

DELETED_TOPICS_FILE: Final = os.path.join("config", "deletedTopics.msgpack")


class DeletedTopics:
    """topic -> barrier offset, persisted under the store root."""

    def __init__(self, root: str, barriers: dict[str, int] | None = None) -> None:
        self.root = root
        self.barriers: dict[str, int] = dict(barriers or {})

    @classmethod
    def load(cls, root: str, min_offset: int = 0) -> DeletedTopics:
        """The marks on disk, without those whose barrier retention has passed (`min_offset`,
        the commit log's first offset). A damaged file is logged and read as empty: its marks
        only keep records of deleted topics out of new queues."""
        path = os.path.join(root, DELETED_TOPICS_FILE)
        barriers: dict[str, int] = {}
        try:
            with open(path, "rb") as handle:
                value = msgpack.unpackb(handle.read(), strict_map_key=False)
            barriers = {str(k): int(v) for k, v in value.items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError, AttributeError, msgpack.UnpackException) as exc:
            log.error("deleted_topics_unreadable", path=path, error=str(exc))
        kept = {topic: end for topic, end in barriers.items() if end > min_offset}
        return cls(root, kept)

    def skips(self, topic: str, physical_offset: int) -> bool:
        """The record of `topic` at `physical_offset` was written before the topic's delete."""
        barrier = self.barriers.get(topic)
        return barrier is not None and physical_offset < barrier

    def skips_key(self, topic_queue_key: str, physical_offset: int) -> bool:
        """`skips` for a record named by its `topic-queueId` key."""
        return bool(self.barriers) and self.skips(
            topic_queue_key.rpartition("-")[0], physical_offset
        )

    def mark(self, topic: str, barrier: int, min_offset: int = 0) -> None:
        """Record the delete of `topic` at commit-log end `barrier`, durably, dropping the marks
        retention has passed (`min_offset`, the log's first offset). Raises OSError."""
        barriers = {t: end for t, end in self.barriers.items() if end > min_offset}
        barriers[topic] = max(barrier, barriers.get(topic, 0))
        make_dirs(os.path.join(self.root, "config"))
        atomic_write(os.path.join(self.root, DELETED_TOPICS_FILE), msgpack.packb(barriers))
        self.barriers = barriers

    def filter_table(self, table: dict[str, int], offset: int) -> dict[str, int]:
        """A topic-queue table taken when the log ended at `offset` without the entries of
        topics deleted at or after that point: they count records the delete made unreachable
        (a table taken after the delete has none of them, the delete removed them)."""
        stale = {topic for topic, end in self.barriers.items() if offset <= end}
        if not stale:
            return table
        return {key: value for key, value in table.items() if key.rpartition("-")[0] not in stale}
