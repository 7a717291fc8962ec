"""Checks of a store after a power cut, beyond `tests.reliability.acks.check_acknowledged`: what
is on disk before any recovery runs, and the consume queues against the log."""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence

from store.checkpoint import StoreCheckpoint
from store.consume_queue import DEFAULT_UNITS_PER_FILE, ConsumeQueue, CqUnit
from store.decode import CommitLogRecord
from store.reader import CommitLogReader
from tests.reliability.acks import Ack


def check_on_disk_after_cut(store_dir: pathlib.Path, acked: Mapping[int, Ack]) -> int:
    """Before the broker runs again: every acknowledged message is already whole in the log
    (nothing is left for recovery to find elsewhere) and the checkpoint is not ahead of the
    valid log. Returns the end of the valid log."""
    with CommitLogReader(str(store_dir)) as scan:
        valid_end = scan._scan_valid_end()
    with CommitLogReader(str(store_dir), readable_end=lambda: valid_end) as reader:
        stored = {rec.physical_offset: rec.body for rec in reader.iter_records(reader.min_offset)}
    for offset, ack in acked.items():
        assert stored.get(offset) == ack.body, f"acknowledged message at {offset} not on disk"
    checkpoint = StoreCheckpoint.load(str(store_dir))
    if checkpoint is not None:
        assert checkpoint.flushed_offset <= valid_end, (
            f"checkpoint at {checkpoint.flushed_offset} is ahead of the log's end {valid_end}"
        )
    return valid_end


def check_consume_queues(
    store_dir: pathlib.Path,
    records: Sequence[CommitLogRecord],
    units_per_file: int = DEFAULT_UNITS_PER_FILE,
) -> None:
    """Every record of the log has its unit in its consume queue, at its queue offset, pointing
    at it (read from a stopped store's files)."""
    queues: dict[tuple[str, int], list[CommitLogRecord]] = {}
    for rec in records:
        queues.setdefault((rec.topic, rec.queue_id), []).append(rec)
    for (topic, queue_id), recs in queues.items():
        queue = ConsumeQueue(str(store_dir), topic, queue_id, units_per_file)
        units: list[CqUnit] = []
        try:
            while batch := queue.read_units(len(units), len(recs) + 1):  # one file at a time
                units.extend(batch)
        finally:
            queue.close()
        assert [(u.queue_offset, u.physical_offset, u.size) for u in units] == [
            (r.queue_offset, r.physical_offset, r.total_size) for r in recs
        ], f"consume queue {topic}/{queue_id} does not match the log"
