"""Frames captured from real RocketMQ 4.x clients (C++ librocketmq, a JavaScript client)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

GOLDEN_DIR = Path(__file__).parent


@dataclass(frozen=True, slots=True)
class Vector:
    """One `### request ...` or `### response ...` block: its title line and raw frame bytes."""

    title: str
    raw: bytes

    @property
    def is_request(self) -> bool:
        return self.title.startswith("### request")


def load_vectors(name: str) -> list[Vector]:
    """The frames of `<name>.hex` in file order, from each block's `raw:` line."""
    vectors: list[Vector] = []
    title = ""
    for line in (GOLDEN_DIR / f"{name}.hex").read_text(encoding="ascii").splitlines():
        if line.startswith("###"):
            title = line
        elif line.startswith("raw:"):
            vectors.append(Vector(title, bytes.fromhex(line.removeprefix("raw:").strip())))
    return vectors
