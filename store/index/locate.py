"""What the message index reads of a run of records, found from the layout alone (numpy).

The index needs five things of a record: its offset, store time, sysFlag, topic and properties.
`locate_run` reads them at their places in `store.layout` for every record of a run found by
`CommitLogReader.iter_walks` (each record's host sizes from its own sysFlag), in a handful of
gathers, without decoding the other fields. It checks what the reads depend on, as
`decode.locate_record` does: the record's PHYSICALOFFSET is its own offset and the body, topic
and properties lengths add up to TOTALSIZE. A run where any record fails gets None: the caller
then decodes it with `columns.decode_columns`, which raises for that record.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from typing import Any, Final, cast

import numpy as np
import numpy.typing as npt

from store import layout
from store.message import BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG
from store.reader import Run
from store.record_columns import Packed

Ints = npt.NDArray[np.int64]

#: where the BODY length field starts, less the two hosts' sizes (store timestamp int64,
#: reconsume times int32 and prepared transaction offset int64 lie between them and it)
_BODY_LENGTH_POS: Final = layout.BORNHOST_POS + 8 + 4 + 8
assert layout.HEADER_V4.size == _BODY_LENGTH_POS + 2 * layout.IPV4_HOST_SIZE + 4


@dataclass(frozen=True, slots=True)
class RunFields:
    """The fields of a run the index reads, in record order (as `RecordColumns` names them)."""

    physical_offset: Ints
    total_size: Ints
    sys_flag: Ints
    store_timestamp: Ints
    topic: Packed
    properties: Packed

    def __len__(self) -> int:
        return len(self.physical_offset)


def locate_run(run: Run) -> RunFields | None:
    """The index's fields of the records of `run`, or None when one of them does not add up."""
    data = np.frombuffer(run.mapping, dtype=np.uint8)
    try:
        return _locate(data, run)
    finally:
        del data  # no export of the mapping outlives the call: retention may close it


def _locate(data: npt.NDArray[np.uint8], run: Run) -> RunFields | None:
    pos = np.asarray(run.positions, dtype=np.int64)
    total = np.asarray(run.sizes, dtype=np.int64)
    end = pos + total
    if len(pos) == 0 or int(end.max()) > min(run.limit, len(data)):
        return None
    sys_flag = _int(data, pos + layout.SYSFLAG_POS, ">i4")
    born = np.where(sys_flag & BORNHOST_V6_FLAG, layout.IPV6_HOST_SIZE, layout.IPV4_HOST_SIZE)
    store = np.where(
        sys_flag & STOREHOSTADDRESS_V6_FLAG, layout.IPV6_HOST_SIZE, layout.IPV4_HOST_SIZE
    )
    body_length_pos = pos + _BODY_LENGTH_POS + born + store
    if (body_length_pos + 4 + 3 > end).any():
        return None
    physical = _int(data, pos + layout.PHYSICALOFFSET_POS, ">i8")
    if (physical != pos + run.base).any():
        return None
    store_timestamp = _int(data, pos + layout.BORNHOST_POS + born, ">i8")
    topic_pos = body_length_pos + 4 + _int(data, body_length_pos, ">i4")
    if ((topic_pos < body_length_pos + 4) | (topic_pos + 3 > end)).any():
        return None
    topic_length = data[topic_pos].astype(np.int64)
    props_pos = topic_pos + 1 + topic_length
    if (props_pos + 2 > end).any():
        return None
    props_length = _int(data, props_pos, ">u2")
    if (props_pos + 2 + props_length != end).any():
        return None
    return RunFields(
        physical,
        total,
        sys_flag,
        store_timestamp,
        _gather(data, topic_pos + 1, topic_length),
        _slices(run.mapping, props_pos + 2, props_length),
    )


def _int(data: npt.NDArray[np.uint8], starts: Ints, dtype: str) -> Ints:
    """The big-endian integers of `dtype` at `starts`, as int64."""
    width = np.dtype(dtype).itemsize
    raw = np.ascontiguousarray(data[starts[:, None] + np.arange(width)])
    return raw.view(dtype).ravel().astype(np.int64)


def _offsets(lengths: Ints) -> Ints:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _gather(data: npt.NDArray[np.uint8], starts: Ints, lengths: Ints) -> Packed:
    """Short fields [start, start + length) back to back, one numpy index for all of them."""
    offsets = _offsets(lengths)
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]))
    values: Any = data[index]
    return Packed(cast(Any, offsets), values.tobytes())


def _slices(mapping: mmap.mmap, starts: Ints, lengths: Ints) -> Packed:
    """Longer fields back to back, a slice each (cheaper than an index per byte past ~20)."""
    ends = (starts + lengths).tolist()
    data = b"".join([mapping[s:e] for s, e in zip(starts.tolist(), ends, strict=True)])
    return Packed(cast(Any, _offsets(lengths)), data)
