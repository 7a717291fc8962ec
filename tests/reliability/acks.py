"""What a crash test remembers of each acknowledged message, and the checks every restart runs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from store.decode import CommitLogRecord


@dataclass(frozen=True, slots=True)
class Ack:
    """An acknowledged message: where its acknowledgement said it was stored."""

    offset: int
    topic: str
    queue_id: int
    queue_offset: int
    body: bytes


def check_acknowledged(records: Sequence[CommitLogRecord], acked: Mapping[int, Ack]) -> None:
    """Every acknowledged message is stored exactly once, at its offset, as acknowledged; no
    body is stored twice; the queue offsets of every queue run 0..n-1; every CRC passes."""
    assert all(rec.crc_ok is not False for rec in records), "a record fails its CRC"
    by_offset = {rec.physical_offset: rec for rec in records}
    assert len(by_offset) == len(records)
    for offset, ack in acked.items():
        rec = by_offset.get(offset)
        assert rec is not None, f"acknowledged message at {offset} is missing"
        assert (rec.topic, rec.queue_id, rec.queue_offset, rec.body) == (
            ack.topic,
            ack.queue_id,
            ack.queue_offset,
            ack.body,
        ), f"record at {offset} is not the acknowledged message"
    bodies = [rec.body for rec in records]
    assert len(set(bodies)) == len(bodies), "a message is stored twice"
    queues: dict[tuple[str, int], list[int]] = defaultdict(list)
    for rec in records:
        queues[(rec.topic, rec.queue_id)].append(rec.queue_offset)
    for key, offsets in queues.items():
        assert offsets == list(range(len(offsets))), f"queue {key} has gaps or duplicates"
