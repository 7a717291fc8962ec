"""The store's housekeeping: put counters, the periodic checkpoint and topic-queue table snapshot,
the disk-space check (the DISK_FULL flag; deleting old data is `store.cleanup`'s), the final
metadata when the store closes, and the background check of a clean stop's tail.

Owns when the metadata files are written (only for data already flushed: the checkpoint never
claims more than the disk holds) and when DISK_FULL is raised or cleared. Each task is handed the
parts of the store it reads (the segments, the commit log, the flags), never the store itself.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable
from typing import Final, TypeVar

import outcome
import structlog
import trio

from store import status
from store.checkpoint import (
    FlushOffsetFile,
    StoreCheckpoint,
    TopicQueueTableSnapshot,
    remove_abort_file,
)
from store.cleanup import store_disk_ratio
from store.commit_log import CommitLog
from store.config import MessageStoreConfig
from store.errors import RecoveryStoppedError
from store.mapped_file_queue import MappedFileQueue
from store.message import PutMessageResult
from store.recovery import verify_tail
from store.status import PutMessageStatus, RunningFlags

log = structlog.get_logger()

#: the background check of a clean stop's tail sleeps this long every few thousand records
VERIFY_PAUSE_S: Final = 0.02
T = TypeVar("T")
#: told of a slow put: (elapsed ms, its result)
SlowPutHook = Callable[[float, PutMessageResult], None]


class StoreStats:
    """Put counts and bytes by status, and slow puts; read by the broker's metrics."""

    __slots__ = (
        "on_slow_put",
        "put_bytes_by_status",
        "put_count_by_status",
        "slow_put_threshold_ms",
        "slow_puts",
    )

    def __init__(
        self, slow_put_threshold_ms: float = math.inf, on_slow_put: SlowPutHook | None = None
    ) -> None:
        self.put_count_by_status: Counter[PutMessageStatus] = Counter()
        self.put_bytes_by_status: Counter[PutMessageStatus] = Counter()
        self.slow_puts = 0
        self.slow_put_threshold_ms = slow_put_threshold_ms
        self.on_slow_put = on_slow_put

    def record(self, put_status: PutMessageStatus, size: int) -> None:
        self.put_count_by_status[put_status] += 1
        self.put_bytes_by_status[put_status] += size

    def finish(self, result: PutMessageResult, size: int, started: float) -> PutMessageResult:
        """Count a finished put (started at trio time `started`), log it when slow; `result`."""
        self.record(result.status, size)
        elapsed_ms = (trio.current_time() - started) * 1000
        if elapsed_ms > self.slow_put_threshold_ms:
            self.slow_puts += 1
            log.warning("slow_put", elapsed_ms=round(elapsed_ms, 1), status=result.status.name)
            if self.on_slow_put is not None:
                self.on_slow_put(elapsed_ms, result)
        return result


class DiskCheck:
    """The DISK_FULL flag, from the used share of the store's disk (`ratio`, the last seen)."""

    def __init__(self, config: MessageStoreConfig, running_flags: RunningFlags) -> None:
        self.config = config
        self.running_flags = running_flags
        self.ratio = 0.0

    async def run(self) -> None:
        """Every `disk_check_interval_ms`: DISK_FULL above the warning ratio, cleared below it."""
        config = self.config
        while True:
            self.apply(await trio.to_thread.run_sync(store_disk_ratio, config))
            await trio.sleep(config.disk_check_interval_ms / 1000)

    def apply(self, ratio: float) -> None:
        """Set DISK_FULL above the warning ratio; clear it only once the ratio is back at or
        under both ratios (RocketMQ's clean-forcibly ratio, where forced cleanup stops), so one
        full spell logs one event."""
        config = self.config
        self.ratio = ratio
        if ratio > config.disk_space_warning_level_ratio:
            if self.running_flags.set(status.DISK_FULL):
                log.error("disk_full", ratio=ratio, limit=config.disk_space_warning_level_ratio)
            return
        low = min(config.disk_space_warning_level_ratio, config.disk_space_clean_forcibly_ratio)
        if ratio <= low and self.running_flags.clear(status.DISK_FULL):
            log.warning("disk_space_recovered", ratio=ratio)


async def checkpoint_loop(
    config: MessageStoreConfig,
    queue: MappedFileQueue,
    commit_log: CommitLog,
    flush_failed: Callable[[], bool],
) -> None:
    """Write the checkpoint when the flushed offset moved, and the topic-queue table snapshot once
    the flushed offset passed the written offset it was taken at; nothing while a flush service
    has failed."""
    root = config.store_path_root_dir
    written_checkpoint = -1
    pending: TopicQueueTableSnapshot | None = None
    failing = False
    while True:
        await trio.sleep(config.checkpoint_interval_ms / 1000)
        flushed = queue.flushed_where
        if flush_failed():
            continue
        try:
            if flushed != written_checkpoint:
                checkpoint = StoreCheckpoint(queue.store_timestamp, flushed)
                await trio.to_thread.run_sync(checkpoint.write, root)
                written_checkpoint = flushed
            if pending is not None and flushed >= pending.offset:
                await trio.to_thread.run_sync(pending.write, root)
                pending = None
        except OSError as exc:
            # A full disk must not stop the store: the checkpoint is only a recovery hint, and
            # the next interval tries again. One event per failing spell.
            if not failing:
                log.error("checkpoint_write_failed", error=str(exc))
            failing = True
            continue
        if failing:
            log.info("checkpoint_write_recovered")
            failing = False
        if pending is None:
            pending = TopicQueueTableSnapshot(
                queue.max_wrote_offset,
                dict(commit_log.topic_queue_table),
                commit_log.last_record_offset,
            )


def shutdown_files(
    root: str,
    queue: MappedFileQueue,
    commit_log: CommitLog,
    flush_offset_file: FlushOffsetFile | None,
    writeable: bool,
) -> None:
    """After the services stopped: the last checkpoint and topic-queue table snapshot, and no
    abort file, when everything written is flushed (and the store still `writeable`); then the
    segments and the flush-offset file are closed."""
    clean = (
        flush_offset_file is not None
        and writeable
        and queue.flushed_where >= queue.max_wrote_offset
    )
    try:
        if clean:
            try:
                StoreCheckpoint(queue.store_timestamp, queue.flushed_where).write(root)
                snapshot = TopicQueueTableSnapshot(
                    queue.flushed_where,
                    dict(commit_log.topic_queue_table),
                    commit_log.last_record_offset,
                )
                snapshot.write(root)
            except OSError as exc:
                # A full disk at shutdown: keep the abort file, so the next start recovers
                # from the commit log itself instead of trusting metadata that was not written.
                log.error("store_close_metadata_failed", error=str(exc))
                clean = False
        if flush_offset_file is not None:
            flush_offset_file.sync()
        if clean:
            remove_abort_file(root)
            log.info("store_closed", offset=queue.flushed_where, segments=len(queue.mapped_files))
        elif flush_offset_file is not None:
            log.warning(
                "store_closed_dirty", flushed=queue.flushed_where, written=queue.max_wrote_offset
            )
    finally:
        queue.close()
        if flush_offset_file is not None:
            flush_offset_file.close()


async def run_stoppable(
    fn: Callable[[threading.Event], T], *, stopped_event: str | None = None
) -> T:
    """`fn(stop)` in a worker thread; a cancel sets `stop`, so `fn` (which checks it now and
    then and raises RecoveryStoppedError) ends soon instead of being waited for. A stop is
    logged as `stopped_event` when given; the cancel then goes on as Cancelled."""
    stop = threading.Event()

    async def stop_when_cancelled() -> None:
        try:
            await trio.sleep_forever()
        finally:
            stop.set()

    done: list[outcome.Outcome[T]] = []
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_when_cancelled)
            # Captured, so that its error is raised as itself, not inside the nursery's group.
            done.append(await outcome.acapture(trio.to_thread.run_sync, fn, stop))
            nursery.cancel_scope.cancel()
    finally:
        result = done[0] if done else None
        error = result.error if isinstance(result, outcome.Error) else None
        if isinstance(error, RecoveryStoppedError) and stopped_event:
            log.info(stopped_event)
    return done[0].unwrap()


async def verify_tail_loop(
    config: MessageStoreConfig, queue: MappedFileQueue, verify_from: int, end: int
) -> None:
    """After a clean stop recovery scanned nothing; check the last segments' records up to
    `end` now, in the background, and report a bad one (bit rot after the stop) as an error
    event. Nothing is cut: the broker is already serving what is there."""
    files = [f for f in queue.mapped_files if verify_from <= f.file_from_offset < end]
    held = [f for f in files if f.hold()]
    try:
        if len(held) < len(files) or not files:
            return  # retention got there first
        started = trio.current_time()
        try:
            found = await run_stoppable(
                lambda stop: verify_tail(files, end, config, stop, VERIFY_PAUSE_S)
            )
        except RecoveryStoppedError:
            return
        except (ValueError, OSError) as exc:  # a segment closed under the check
            log.warning("commit_log_verify_abandoned", error=str(exc))
            return
        if found is None:
            log.info(
                "commit_log_verified",
                start=verify_from,
                end=end,
                seconds=round(trio.current_time() - started, 1),
            )
            return
        file_name, offset, reason = found
        log.error(
            "commit_log_corrupt",
            file=file_name,
            offset=offset,
            reason=reason,
            found_by="background check after a clean stop",
        )
    finally:
        for mapped_file in held:
            mapped_file.release()
