"""The values the request fuzzer draws from its input: name pools shared across requests, edge
numbers, odd strings and other JSON types, and `Memory` of what the broker's answers gave out.

`Source` is what they read (atheris's `FuzzedDataProvider`). A used-up input reads as zeros, so
every choice puts its common, valid case at 0 and its rare one at the top (`rare`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Protocol

TOPICS = (
    "T0",
    "T1",
    "%RETRY%G0",
    "%DLQ%G1",
    "SCHEDULE_TOPIC_XXXX",
    "TBW102",
    "RMQ_SYS_TRANS_HALF_TOPIC",
)
GROUPS = ("G0", "G1", "CID_RMQ_SYS_TRANS", "%RETRY%G0", "DEFAULT_CONSUMER")
CLIENTS = ("10.0.0.1@1", "10.0.0.2@2", "")
EDGE_INTS = (
    0,
    -1,
    1,
    3,
    16,
    17,
    255,
    2**31 - 1,
    -(2**31),
    2**31,
    2**63 - 1,
    -(2**63),
    2**64,
    10**30,
)
#: a zlib "bomb": a small body that inflates to 64 MiB, sent with the compressed sysFlag
BOMB = zlib.compress(b"\0" * (64 << 20), 9)


class Source(Protocol):
    """What the script reads from: `atheris.FuzzedDataProvider` has these methods."""

    def ConsumeIntInRange(self, low: int, high: int) -> int: ...
    def ConsumeBool(self) -> bool: ...
    def ConsumeBytes(self, count: int) -> bytes: ...
    def ConsumeUnicodeNoSurrogates(self, count: int) -> str: ...
    def ConsumeFloat(self) -> float: ...


@dataclass
class Memory:
    """What earlier answers gave out: commit-log offsets, message ids, queue offsets."""

    physical_offsets: list[int] = field(default_factory=lambda: [0])
    msg_ids: list[str] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=lambda: [0])

    def remember(self, offset: int, msg_id: str, queue_offset: int) -> None:
        self.physical_offsets = [*self.physical_offsets[-31:], offset]
        self.msg_ids = [*self.msg_ids[-31:], msg_id]
        self.queue_offsets = [*self.queue_offsets[-31:], queue_offset]


def rare(src: Source, odds: int) -> bool:
    """True about once in `odds + 1` draws, and False once the input is used up (reads 0)."""
    return src.ConsumeIntInRange(0, odds) == odds


def pick(src: Source, values: tuple[Any, ...] | list[Any]) -> Any:
    return values[src.ConsumeIntInRange(0, len(values) - 1)] if values else None


def hostile_value(src: Source, memory: Memory) -> Any:
    """A value for any field: names from the pools, edge numbers, odd strings, other JSON types."""
    kind = src.ConsumeIntInRange(0, 11)
    if kind == 0:
        return pick(src, TOPICS + GROUPS)
    if kind == 1:
        return str(pick(src, EDGE_INTS))
    if kind == 2:
        return pick(src, EDGE_INTS)  # a JSON number where a string belongs
    if kind == 3:
        return pick(src, (None, True, False, [], {}, ["x"], {"a": 1}, 1.5, -0.0, 1e300))
    if kind == 4:
        return src.ConsumeUnicodeNoSurrogates(src.ConsumeIntInRange(0, 40))
    if kind == 5:
        return "x" * pick(src, (127, 128, 255, 256, 4096, 70_000))
    if kind == 6:
        return str(pick(src, memory.physical_offsets))
    if kind == 7:
        return str(pick(src, memory.queue_offsets) + src.ConsumeIntInRange(-2, 2))
    if kind == 8:
        return pick(src, memory.msg_ids) or ""
    if kind == 9:
        return "\x01\x02".join(
            pick(src, ("DELAY", "3", "TRAN_MSG", "true", "WAIT", "x\x01", "")) for _ in range(3)
        )
    if kind == 10:
        return str(src.ConsumeFloat())
    return pick(src, CLIENTS)


def mutate(src: Source, memory: Memory, fields: dict[str, Any]) -> dict[str, Any]:
    names = [*fields, "zz"]
    for _ in range(src.ConsumeIntInRange(0, 3)):
        name = pick(src, names)
        if rare(src, 7):
            fields.pop(name, None)
        else:
            fields[name] = hostile_value(src, memory)
    return fields
