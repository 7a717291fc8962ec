"""Options of the `commitlog` source, parsed once on the driver into a frozen value.

Owns option names, defaults and validation. Every bad name or value raises
`CommitLogOptionError` naming the option, so a typo fails the query at planning time instead of
silently reading something else. Spark hands options over as a case-insensitive mapping of strings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

EARLIEST: Final = "earliest"
LATEST: Final = "latest"
DEFAULT_SPLIT_BYTES: Final = 128 * 1024 * 1024

OffsetSpec = Literal["earliest", "latest"] | int

# Canonical spelling of every option; keys are matched case-insensitively as Spark does.
KNOWN_OPTIONS: Final = (
    "path",
    "startingOffsets",
    "endingOffsets",
    "topics",
    "includeBody",
    "verifyCrc",
    "failOnCrcError",
    "splitBytes",
    "maxBytesPerTrigger",
    "failOnDataLoss",
)


class CommitLogOptionError(ValueError):
    """A `commitlog` option is unknown, missing or has a value that cannot be used."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"commitlog option {option!r}: {message}")
        self.option = option


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """What a `commitlog` read was asked for; picklable, shipped to every task."""

    store_dir: str
    starting_offsets: OffsetSpec = EARLIEST
    ending_offsets: OffsetSpec = LATEST
    topics: frozenset[str] | None = None
    include_body: bool = True
    verify_crc: bool = True
    fail_on_crc_error: bool = False
    split_bytes: int = DEFAULT_SPLIT_BYTES
    max_bytes_per_trigger: int | None = None
    fail_on_data_loss: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Validate Spark's option mapping; the store path is made absolute here, on the driver."""
        given = {key.lower(): (key, value) for key, value in options.items()}
        known = {name.lower(): name for name in KNOWN_OPTIONS}
        for lowered, (key, _) in given.items():
            if lowered not in known:
                raise CommitLogOptionError(
                    key, f"unknown option; known: {', '.join(KNOWN_OPTIONS)}"
                )
        raw = {known[lowered]: value for lowered, (_, value) in given.items()}
        if not raw.get("path"):
            raise CommitLogOptionError("path", "the store directory is required: load(store_dir)")
        parsed = cls(
            store_dir=os.path.abspath(raw["path"]),
            starting_offsets=_offset("startingOffsets", raw.get("startingOffsets"), EARLIEST),
            ending_offsets=_offset("endingOffsets", raw.get("endingOffsets"), LATEST),
            topics=_topics(raw.get("topics")),
            include_body=_bool("includeBody", raw.get("includeBody"), default=True),
            verify_crc=_bool("verifyCrc", raw.get("verifyCrc"), default=True),
            fail_on_crc_error=_bool("failOnCrcError", raw.get("failOnCrcError"), default=False),
            split_bytes=_positive("splitBytes", raw.get("splitBytes")) or DEFAULT_SPLIT_BYTES,
            max_bytes_per_trigger=_positive("maxBytesPerTrigger", raw.get("maxBytesPerTrigger")),
            fail_on_data_loss=_bool("failOnDataLoss", raw.get("failOnDataLoss"), default=True),
        )
        parsed.check()
        return parsed

    def check(self) -> None:
        """Cross-option rules."""
        if self.fail_on_crc_error and not self.verify_crc:
            raise CommitLogOptionError("failOnCrcError", "needs verifyCrc=true")
        if self.ending_offsets == EARLIEST:
            raise CommitLogOptionError("endingOffsets", "must be 'latest' or a physical offset")
        start, end = self.starting_offsets, self.ending_offsets
        if isinstance(start, int) and isinstance(end, int) and end < start:
            raise CommitLogOptionError("endingOffsets", f"{end} is below startingOffsets {start}")


def _offset(name: str, value: str | None, default: OffsetSpec) -> OffsetSpec:
    if value is None:
        return default
    text = value.strip().lower()
    if text in (EARLIEST, LATEST):
        return EARLIEST if text == EARLIEST else LATEST
    try:
        offset = int(text)
    except ValueError:
        raise CommitLogOptionError(
            name, f"{value!r} is not 'earliest', 'latest' or a physical offset"
        ) from None
    if offset < 0:
        raise CommitLogOptionError(name, f"physical offset {offset} is negative")
    return offset


def _bool(name: str, value: str | None, *, default: bool) -> bool:
    if value is None:
        return default
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise CommitLogOptionError(name, f"{value!r} is not 'true' or 'false'")
    return text == "true"


def _positive(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        raise CommitLogOptionError(name, f"{value!r} is not a whole number of bytes") from None
    if number <= 0:
        raise CommitLogOptionError(name, f"{number} must be positive")
    return number


def _topics(value: str | None) -> frozenset[str] | None:
    if value is None:
        return None
    names = frozenset(part.strip() for part in value.split(",") if part.strip())
    if not names:
        raise CommitLogOptionError("topics", "empty list; leave the option out to read all topics")
    return names
