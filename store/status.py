"""Outcomes of a put (`PutMessageStatus`, `AppendMessageStatus`) and the store's `RunningFlags`.

Owns the names; the broker owns the mapping to response codes (`broker/responses.py`).
"""

from __future__ import annotations

import enum
from typing import Final


class PutMessageStatus(enum.Enum):
    """What `DefaultMessageStore.put_message` answers (RocketMQ 5.x spellings, 4.9 meanings)."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    LMQ_CONSUME_QUEUE_NUM_EXCEEDED = "LMQ_CONSUME_QUEUE_NUM_EXCEEDED"
    # Not in RocketMQ: the bounded writer channel is full (the broker answers SYSTEM_BUSY).
    WRITER_QUEUE_FULL = "WRITER_QUEUE_FULL"

    # Members are singletons compared by identity, so the identity hash is a correct one, and
    # a C one: Enum's own hashes the name in Python, on every status lookup of every put.
    __hash__ = object.__hash__


class AppendMessageStatus(enum.Enum):
    """What one append into a segment produced (RocketMQ `AppendMessageStatus`)."""

    PUT_OK = "PUT_OK"
    END_OF_FILE = "END_OF_FILE"
    MESSAGE_SIZE_EXCEEDED = "MESSAGE_SIZE_EXCEEDED"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


NOT_READABLE: Final = 1
NOT_WRITEABLE: Final = 2
WRITE_LOGICS_QUEUE_ERROR: Final = 4
WRITE_INDEX_FILE_ERROR: Final = 8
DISK_FULL: Final = 16
# Not in RocketMQ: the next segment could not be created; cleared when a later creation succeeds.
CREATE_MAPPED_FILE_FAILED: Final = 32
_NOT_WRITEABLE_MASK: Final = (
    NOT_WRITEABLE | WRITE_LOGICS_QUEUE_ERROR | WRITE_INDEX_FILE_ERROR | DISK_FULL
) | CREATE_MAPPED_FILE_FAILED


class RunningFlags:
    """The store's health bits (RocketMQ `RunningFlags`); writeable when no blocking bit is set.

    Mutated only from the trio thread; reads are plain attribute reads.
    """

    __slots__ = ("flag_bits",)

    def __init__(self) -> None:
        self.flag_bits = 0

    def is_writeable(self) -> bool:
        return not self.flag_bits & _NOT_WRITEABLE_MASK

    def is_readable(self) -> bool:
        return not self.flag_bits & NOT_READABLE

    def is_set(self, bit: int) -> bool:
        return bool(self.flag_bits & bit)

    def set(self, bit: int) -> bool:
        """Set `bit`; True when it was clear before (so callers log a change once)."""
        was_clear = not self.flag_bits & bit
        self.flag_bits |= bit
        return was_clear

    def clear(self, bit: int) -> bool:
        """Clear `bit`; True when it was set before."""
        was_set = bool(self.flag_bits & bit)
        self.flag_bits &= ~bit
        return was_set

    def __repr__(self) -> str:
        return f"RunningFlags(flag_bits={self.flag_bits:#x})"
