"""Typed errors that stop the store at startup; the CLI prints them. Put outcomes are values."""

from __future__ import annotations


class StoreError(Exception):
    """Base of the store's startup errors."""


class StoreLockedError(StoreError):
    """Another store holds the directory's lock file."""

    def __init__(self, lock_path: str) -> None:
        super().__init__(f"store directory is in use by another broker: lock held on {lock_path}")
        self.lock_path = lock_path


class StoreLoadError(StoreError):
    """A segment cannot be loaded (wrong length, gap between names); names the file."""

    def __init__(self, file_name: str, reason: str) -> None:
        super().__init__(f"{file_name}: {reason}")
        self.file_name = file_name
        self.reason = reason


class CommitLogCorruptError(StoreError):
    """A bad record followed by valid ones before the durable end: not a torn tail."""

    def __init__(self, file_name: str, offset: int, reason: str) -> None:
        super().__init__(
            f"commit log corrupt in {file_name} at physical offset {offset} ({reason}); "
            "valid records follow, so this is not a torn tail. "
            "Set recover_truncate_corrupt to cut the log there."
        )
        self.file_name = file_name
        self.offset = offset
        self.reason = reason


class RecoveryStoppedError(StoreError):
    """Recovery was asked to stop before it changed anything (the scan is read-only)."""

    def __init__(self, offset: int) -> None:
        super().__init__(f"recovery stopped at physical offset {offset}; the next start resumes it")
        self.offset = offset
