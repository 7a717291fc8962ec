"""How many times each message of a FIFO group was handed out, kept across restarts.

A FIFO pop's message that is not acknowledged in time is handed out again from its queue (the
queue stays blocked meanwhile), and each time its count goes up: the client reads it as the
delivery attempt, and past the group's `retryMaxTimes` the message goes to the DLQ. 5.x keeps
these counts in its consumer order info, a config file persisted now and then; so does this
broker, as `config/popOrderAttempts.json`, written atomically every
`flush_consumer_offset_interval_ms` when it changed and once more at shutdown (so a kill -9
loses at most that interval of counts, as 5.x does).

The table only holds messages handed out again and neither acknowledged nor sent to the DLQ
yet, so it is bounded by the FIFO messages in flight. `prune` drops, after the revive replay,
what a kill -9 left behind: a count of a message acknowledged after the last write.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

import structlog
import trio

from broker.consumer_offsets import persist_every
from broker.topic_config import write_json_atomically
from store.errors import StoreLoadError

log = structlog.get_logger()

ORDER_ATTEMPTS_FILE: Final = "popOrderAttempts.json"

#: (group, topic, queue id, queue offset)
Key = tuple[str, str, int, int]


def load(path: Path | None) -> dict[Key, int]:
    """The persisted counts; none when the file is missing, an error when it is damaged."""
    if path is None or not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        rows = data["orderAttempts"]
        table: dict[Key, int] = {}
        for row in rows:
            key = (str(row["group"]), str(row["topic"]), int(row["queueId"]), int(row["offset"]))
            table[key] = int(row["attempts"])
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise StoreLoadError(str(path), f"unreadable FIFO delivery counts: {exc}") from None
    log.info("pop_order_attempts_loaded", entries=len(table))
    return table


def prune(
    table: dict[Key, int],
    committed: Callable[[str, str, int], int | None],
    in_flight: Iterable[Key],
) -> int:
    """Drop the counts of messages below their group's pop offset that no checkpoint holds in
    flight (acknowledged or dead-lettered); how many. A message handed out again sits at the
    pop offset, which was moved back to it, or is held by a checkpoint."""
    held = set(in_flight)
    gone = [
        key
        for key in table
        if key not in held and key[3] < (committed(key[0], key[1], key[2]) or 0)
    ]
    for key in gone:
        del table[key]
    return len(gone)


class OrderAttemptsFile:
    """Writes the table it is given when it changed since the last write."""

    def __init__(self, path: Path | None, table: dict[Key, int]) -> None:
        self.path = path
        self.table = table
        self._written: dict[Key, int] = dict(table)
        self._failing = False

    async def persist(self) -> None:
        if self.path is None or self.table == self._written:
            return
        snapshot = dict(self.table)
        payload = {
            "orderAttempts": [
                {"group": g, "topic": t, "queueId": q, "offset": o, "attempts": n}
                for (g, t, q, o), n in sorted(snapshot.items())
            ]
        }
        try:
            await trio.to_thread.run_sync(write_json_atomically, self.path, payload)
        except OSError as exc:
            if not self._failing:
                self._failing = True
                log.error("pop_order_attempts_persist_failed", file=str(self.path), error=str(exc))
            return
        self._written = snapshot
        if self._failing:
            self._failing = False
            log.info("pop_order_attempts_persist_recovered", file=str(self.path))

    async def run(
        self, interval_s: float, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Persist every `interval_s` and once more when cancelled (shutdown)."""
        await persist_every(interval_s, self.persist, task_status)
