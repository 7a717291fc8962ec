"""A run of records column by column: `RecordColumns`, and `Packed` for variable-length fields.

What `store.columns.decode_columns` returns on both of its paths (pure Python and
`store.columns_fast`), and what the Spark source turns into Arrow arrays. Decodes nothing
itself: a column's row becomes a `CommitLogRecord` through `store.decode.build_record`.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from inspect import signature
from itertools import accumulate, pairwise, starmap
from typing import Any, Final

from store.decode import CommitLogRecord, build_record

MAX_RUN_BYTES: Final = (1 << 31) - 1  # Packed offsets are int32, as Arrow's are


class Packed:
    """Variable-length fields back to back: field i is `data[offsets[i]:offsets[i + 1]]`.

    `offsets` holds len + 1 int32 values (an `array('i')`, or a numpy array on the fast path), in
    the layout of Arrow's binary arrays. Built from a list of fields (`of`), both are computed on
    first use, so a reader that wants the fields one by one never copies them twice.
    """

    __slots__ = ("_data", "_items", "_offsets")

    def __init__(self, offsets: Sequence[int], data: bytes) -> None:
        self._offsets: Sequence[int] | None = offsets
        self._data: bytes | None = data
        self._items: list[bytes] | None = None

    @classmethod
    def of(cls, items: list[bytes]) -> Packed:
        packed = cls((), b"")
        packed._offsets, packed._data, packed._items = None, None, items
        return packed

    @property
    def offsets(self) -> Sequence[int]:
        if self._offsets is None:
            assert self._items is not None
            self._offsets = array("i", accumulate(map(len, self._items), initial=0))
        return self._offsets

    @property
    def data(self) -> bytes:
        if self._data is None:
            assert self._items is not None
            self._data = b"".join(self._items)
        return self._data

    def __len__(self) -> int:
        return len(self._items) if self._items is not None else len(self.offsets) - 1

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Packed):
            return NotImplemented
        return self.tolist() == other.tolist()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Packed({self.tolist()!r})"

    def tolist(self) -> list[bytes]:
        if self._items is not None:
            return list(self._items)
        bounds = [int(o) for o in self.offsets]
        data = self.data
        return [data[a:b] for a, b in pairwise(bounds)]


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """A run of records, one column per field, in record order.

    Integer columns are lists, or numpy arrays of the field's width on the fast path. Hosts are
    the raw host fields (address + int32 port, 8 or 20 bytes); topic and properties raw UTF-8.
    `body` is None unless asked for; `crc_ok` is None unless the CRC was verified.
    """

    physical_offset: Sequence[int]
    total_size: Sequence[int]
    body_crc: Sequence[int]
    queue_id: Sequence[int]
    flag: Sequence[int]
    queue_offset: Sequence[int]
    sys_flag: Sequence[int]
    born_timestamp: Sequence[int]
    born_host: Packed
    store_timestamp: Sequence[int]
    store_host: Packed
    reconsume_times: Sequence[int]
    prepared_transaction_offset: Sequence[int]
    topic: Packed
    properties: Packed
    body: Packed | None
    crc_ok: Sequence[bool] | None

    def __len__(self) -> int:
        return len(self.physical_offset)

    def to_pydict(self) -> dict[str, list[Any] | None]:
        """Every column as a list of Python values (None for a column not produced)."""
        return {name: _pylist(getattr(self, name)) for name in _FIELDS}

    def records(self) -> Iterator[CommitLogRecord]:
        """The run as `CommitLogRecord`s, each made by `decode.build_record`."""
        columns = [_pylist(getattr(self, name)) for name in _FIELDS]
        absent = [None] * len(self)
        rows = zip(*(absent if column is None else column for column in columns), strict=True)
        return starmap(build_record, rows)


# The fields in order; a row of them is `build_record`'s arguments.
_FIELDS: Final = tuple(field.name for field in fields(RecordColumns))
assert tuple(signature(build_record).parameters) == _FIELDS, _FIELDS


def _pylist(column: Sequence[Any] | Packed | None) -> list[Any] | None:
    if column is None:
        return None
    if isinstance(column, Packed):
        return column.tolist()
    tolist = getattr(column, "tolist", None)
    return list(column) if tolist is None else list(tolist())
