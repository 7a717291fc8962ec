"""`CommitLogReader`: records of a store directory, from any process, never past the durable end.

Owns read-only access to the segments for tools and the Spark source. The durable end is the
store's `flushoffset` file (advanced only after a successful fdatasync, always a record
boundary); a directory without it (a copied store) ends at the last valid record. Knows no trio
and never writes. Finding and decoding records is `store.columns` on the read-only mappings.
"""

from __future__ import annotations

import functools
import mmap
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from store.checkpoint import read_flush_offset
from store.columns import decode_columns, walk
from store.decode import (
    CommitLogRecord,
    RecordFormatError,
    check_message_and_return_size,
    find_record_boundary,
)
from store.mapped_file import is_segment_name
from store.record_columns import RecordColumns
from store.segment_view import SegmentView, open_segment

_RUN = 256  # records decoded at a time: bounds memory, keeps the iterator lazy


class SegmentGoneError(RecordFormatError):
    """The segment holding `offset` was deleted (retention) before it could be read."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset, "segment deleted by retention")


@dataclass(frozen=True, slots=True)
class Run:
    """Records found in one segment: its mapping (at physical offset `base`, readable below
    `limit`), and the positions and sizes of the records in it."""

    mapping: mmap.mmap
    base: int
    limit: int
    positions: list[int]
    sizes: list[int]


class CommitLogReader:
    """Read-only view of `<store_dir>/commitlog`; `close()` releases the mappings."""

    def __init__(self, store_dir: str, readable_end: Callable[[], int] | None = None) -> None:
        """`readable_end`, given by the store's own process, replaces the published durable
        offset as the bound (the consume-queue dispatcher under ASYNC_FLUSH follows writes)."""
        self.store_dir = store_dir
        self._readable_end = readable_end
        self.commitlog_dir = os.path.join(store_dir, "commitlog")
        self.segments: list[tuple[int, str]] = []
        self._maps: dict[int, SegmentView] = {}
        self._scanned_end: int | None = None
        self.refresh()
        flush_offset = read_flush_offset(store_dir)
        if flush_offset is not None and flush_offset[2] > 0:
            self.segment_size = flush_offset[2]
        elif self.segments:
            self.segment_size = os.path.getsize(self.segments[0][1])
        else:
            self.segment_size = 1 << 30

    def refresh(self) -> None:
        """Re-list the segments (the store adds new ones while it runs)."""
        try:
            names = sorted(n for n in os.listdir(self.commitlog_dir) if is_segment_name(n))
        except FileNotFoundError:
            names = []
        self.segments = [(int(n), os.path.join(self.commitlog_dir, n)) for n in names]

    def close(self) -> None:
        for view in self._maps.values():
            view.close()
        self._maps.clear()

    def release_below(self, offset: int) -> None:
        """Unmap (and unlock) the segments that end at or below `offset`: the store's cleanup
        may delete them, and this reader will not go back there."""
        for base in [b for b in self._maps if b + self.segment_size <= offset]:
            self._maps.pop(base).close()
        self.segments = [(b, p) for b, p in self.segments if b + self.segment_size > offset]

    def __enter__(self) -> CommitLogReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def min_offset(self) -> int:
        return self.segments[0][0] if self.segments else 0

    def durable_offset(self) -> int:
        """End of what may be read: the store's flushed offset, or the last valid record's end."""
        if self._readable_end is not None:
            return self._readable_end()
        flush_offset = read_flush_offset(self.store_dir)
        if flush_offset is not None:
            return flush_offset[0]
        if self._scanned_end is None:
            self._scanned_end = self._scan_valid_end()
        return self._scanned_end

    def _segment(self, base: int) -> mmap.mmap | None:
        """The mapping of the segment at `base`, or None when there is none (never written, or
        deleted by retention: a mapping taken before the deletion stays readable)."""
        view = self._maps.get(base)
        if view is not None:
            return view.mm
        if not any(b == base for b, _ in self.segments):
            self.refresh()
        for segment_base, path in self.segments:
            if segment_base == base:
                view = open_segment(path)
                if view is None:
                    return None
                self._maps[base] = view
                return view.mm
        return None

    def _first_base(self) -> int:
        self.refresh()
        return self.min_offset

    def _scan_valid_end(self) -> int:
        """The end of the last whole record, for a store without `flushoffset` (a copy, say).

        A record whose body fails its CRC ends the log only when nothing valid follows it (a
        torn tail); in the middle it is damage that readers report, and the records after it
        stay readable.
        """
        position = self.min_offset
        size = self.segment_size
        while True:
            base = position - position % size
            mapping = self._segment(base)
            if mapping is None:
                return position
            check = check_message_and_return_size(mapping, position - base, position, False)
            if not check.ok:
                return position
            if check.size == 0:  # BLANK: the segment is complete
                position = base + size
                continue
            whole = check_message_and_return_size(mapping, position - base, position, True).ok
            if not whole and not self._valid_at(position + check.size):
                return position
            position += check.size

    def _valid_at(self, position: int) -> bool:
        """Whether a whole record (or a segment's BLANK end) starts at `position`."""
        base = position - position % self.segment_size
        mapping = self._segment(base)
        if mapping is None or position - base >= len(mapping):
            return False
        return check_message_and_return_size(mapping, position - base, position, True).ok

    def iter_records(
        self, start: int, end: int | None = None, include_body: bool = True, verify_crc: bool = True
    ) -> Iterator[CommitLogRecord]:
        """Records starting at `start` (a record start) up to `end` or the durable offset.

        Crosses segments at BLANK records. Yields every record before the first bad one, then
        raises RecordFormatError for it (corruption below the durable offset, or `start` is not a
        record start: use `next_boundary`). The records of `iter_columns`' pure-Python path.
        """
        runs = self.iter_columns(
            start, end, include_body=include_body, verify_crc=verify_crc, vectorised=False
        )
        for columns in runs:
            yield from columns.records()

    def iter_columns(
        self,
        start: int,
        end: int | None = None,
        *,
        include_body: bool = True,
        verify_crc: bool = True,
        vectorised: bool | None = None,
        run: int = _RUN,
    ) -> Iterator[RecordColumns]:
        """The records of `iter_records` in runs of at most `run`, column by column.

        Decodes the runs of `iter_walks` with `columns.decode_columns` (`vectorised` as there).
        Before raising for a bad record, yields the run of those before it. A consumer that
        stops early resumes at the end of the last record it was given.
        """
        for found in self.iter_walks(start, end, run=run):
            decode = functools.partial(
                decode_columns,
                found.mapping,
                base=found.base,
                limit=found.limit,
                include_body=include_body,
                verify_crc=verify_crc,
                vectorised=vectorised,
            )
            try:
                columns = decode(found.positions)
            except RecordFormatError as exc:
                good = found.positions[: found.positions.index(exc.offset - found.base)]
                if good:
                    yield decode(good)
                raise
            yield columns

    def iter_walks(self, start: int, end: int | None = None, *, run: int = _RUN) -> Iterator[Run]:
        """Where the records of `iter_records` lie, at most `run` at a time (none decoded).

        Crosses segments at BLANK records; raises RecordFormatError for a header that is not a
        record after yielding the run before it.
        """
        durable = self.durable_offset()
        stop = durable if end is None else min(end, durable)
        size = self.segment_size
        position = start
        while position < stop:
            base = position - position % size
            mapping = self._segment(base)
            if mapping is None:
                if position < self._first_base():
                    raise SegmentGoneError(position)
                raise RecordFormatError(position, "segment missing")
            limit = min(size, durable - base)
            found = walk(
                mapping, position - base, stop - base, base=base, limit=limit, max_records=run
            )
            if found.positions:
                yield Run(mapping, base, limit, found.positions, found.sizes)
            if found.error is not None:
                raise found.error
            if found.ended:
                position = base + size
            elif found.positions:
                position = base + found.next_position
            else:  # the segment file ends before the segment size says it should
                raise RecordFormatError(position, "segment shorter than the segment size")

    def next_boundary(self, offset: int) -> int | None:
        """First record start at or after `offset` and below the durable offset, or None.

        Resyncs at an arbitrary byte by structure: the magic code, the record's own offset and
        consistent sizes. The body CRC is not asked for: a record with a damaged body is still a
        record, and a resync that stepped over it would drop it where a sequential read reports
        it (`crc_ok` False, or the reader's CRC error).
        """
        durable = self.durable_offset()
        size = self.segment_size
        position = max(offset, self.min_offset)
        while position < durable:
            base = position - position % size
            mapping = self._segment(base)
            if mapping is None:
                return None
            limit = min(size, durable - base)
            found = find_record_boundary(mapping, position - base, base, limit, verify_crc=False)
            if found is not None:
                return base + found
            position = base + size
        return None
