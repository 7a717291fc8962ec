"""Retention: deleting old commit-log segments and the consume-queue files that pointed into them
(RocketMQ 4.9 `DefaultMessageStore.CleanCommitLogService` / `CleanConsumeQueueService`,
`MappedFileQueue.deleteExpiredFileByTime`, `ConsumeQueue.deleteExpiredFile`).

Owns when a segment may go and in what order:
- a segment is expired when its file was last modified `file_reserved_time` hours ago;
- expired segments go, oldest first, at a `delete_when` hour, at any hour while the disk is above
  `disk_max_used_space_ratio`, and in the rounds after a manual request (TRIGGER_DELETE_FILES);
- above the clean-forcibly ratio (with `clean_file_forcibly_enable`) the oldest go even when not
  expired, until the disk is back under it;
- never the segment being written, never one holding bytes past the deletable end (flushed,
  committed and dispatched), never more than `DELETE_FILES_BATCH_MAX` a round, with
  `delete_physic_files_interval` between two deletions;
- a segment some reader still uses (`MappedFile.in_use`) waits until it is free or until
  `destroy_mapped_file_interval_forcibly` has passed; deleting is an unlink, so even then a reader
  keeps valid pages, never SIGBUS.
Once the log's first offset moved, the consume queues drop their files below it and correct their
minimum offsets, and the index drops its files that point only below it. Knows files, offsets
and clocks; the store hands in what it must not know.
"""

from __future__ import annotations

import enum
import math
import os
import time
from collections import Counter
from collections.abc import Callable
from typing import Final

import structlog
import trio

from store.config import MessageStoreConfig
from store.dispatch import ConsumeQueueTable
from store.index.service import IndexService
from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue

log = structlog.get_logger()

#: at most this many segments a round (RocketMQ's DELETE_FILES_BATCH_MAX)
DELETE_FILES_BATCH_MAX: Final = 10
#: rounds that delete expired segments at any hour after a manual request (RocketMQ's
#: MAX_MANUAL_DELETE_FILE_TIMES)
MANUAL_DELETE_ROUNDS: Final = 20
HOUR_MS: Final = 3_600_000


class DeleteReason(enum.Enum):
    """Why a segment was deleted: the metric's label and the log event's `reason`."""

    EXPIRED = "expired"
    FORCED = "forced"
    MANUAL = "manual"


def disk_used_ratio(path: str) -> float:
    """used / (used + available), rounded up to a whole percent, as RocketMQ computes it."""
    stat = os.statvfs(path)
    total = stat.f_blocks * stat.f_frsize
    available = stat.f_bavail * stat.f_frsize
    used = total - stat.f_bfree * stat.f_frsize
    if used + available <= 0:
        return 0.0
    return math.ceil(used * 100 / (used + available)) / 100


def store_disk_ratio(config: MessageStoreConfig) -> float:
    """The fuller of the commit log's and the consume queues' file systems (worker thread)."""
    ratio = disk_used_ratio(config.store_path_commit_log)
    logics = os.path.join(config.store_path_root_dir, "consumequeue")
    if (
        os.path.isdir(logics)
        and os.stat(logics).st_dev != os.stat(config.store_path_commit_log).st_dev
    ):
        ratio = max(ratio, disk_used_ratio(logics))
    return ratio


def local_hour() -> int:
    """The hour of day in the local time zone, as RocketMQ's `UtilAll.isItTimeToDo` reads it."""
    return time.localtime().tm_hour


class CleanCommitLogService:
    """Deletes segments a round at a time (`run_round`); `clean_files_periodically` runs the
    rounds."""

    def __init__(
        self,
        config: MessageStoreConfig,
        queue: MappedFileQueue,
        *,
        deletable_end: Callable[[], int],
        on_disk_ratio: Callable[[float], None],
        release_below: Callable[[int], None],
        wall_ms: Callable[[], int],
        hour: Callable[[], int] = local_hour,
    ) -> None:
        self.config = config
        self.queue = queue
        self.deletable_end = deletable_end
        self.on_disk_ratio = on_disk_ratio
        self.release_below = release_below
        self.wall_ms = wall_ms
        self.hour = hour
        self.deleted: Counter[DeleteReason] = Counter()
        #: removed from the queue, not yet from the disk (a reader still uses them), and why
        self.dying: list[tuple[MappedFile, DeleteReason]] = []
        self.manual_rounds = 0
        self.requested = trio.Event()
        self._round_lock = trio.Lock()  # a requested round never overlaps a running one
        self._last_redelete_ms = 0
        self._deferred_logged: set[str] = set()

    def close(self) -> None:
        """Close the segments whose deletion a reader still holds back (the store is closing;
        the next start deletes them)."""
        for mapped_file, _ in self.dying:
            mapped_file.close()

    def execute_delete_files_manually(self) -> None:
        """TRIGGER_DELETE_FILES: the next rounds delete expired segments at any hour."""
        self.manual_rounds = MANUAL_DELETE_ROUNDS
        self.requested.set()
        log.info("delete_files_requested", rounds=MANUAL_DELETE_ROUNDS)

    async def run_round(self) -> int:
        """One round: check the disk, then delete what the rules allow; how many went."""
        async with self._round_lock:
            return await self._round()

    async def _round(self) -> int:
        config = self.config
        ratio = await trio.to_thread.run_sync(store_disk_ratio, config)
        self.on_disk_ratio(ratio)
        time_up = self.hour() in config.delete_hours()
        space_full = ratio > config.disk_max_used_space_ratio / 100
        manual = self.manual_rounds > 0
        now = self.wall_ms()
        due = time_up or space_full or manual
        deleted = 0
        if self.dying and (
            due or now - self._last_redelete_ms > config.redelete_hanged_file_interval
        ):
            self._last_redelete_ms = now
            deleted += await self._retry_dying(now)
        if not due:
            return deleted
        if manual:
            self.manual_rounds -= 1
        if self.dying:
            return deleted  # the oldest still hangs: nothing after it goes first
        reason = DeleteReason.MANUAL if manual and not (time_up or space_full) else None
        deleted += await self._delete_oldest(now, ratio, reason)
        if not deleted and space_full:
            log.warning("disk_space_low_nothing_deletable", ratio=ratio)
        return deleted

    def _forcing(self, ratio: float) -> bool:
        config = self.config
        limit = min(config.disk_space_clean_forcibly_ratio, config.disk_space_warning_level_ratio)
        return config.clean_file_forcibly_enable and ratio > limit

    async def _delete_oldest(self, now: int, ratio: float, reason: DeleteReason | None) -> int:
        config = self.config
        queue = self.queue
        reserved_ms = config.file_reserved_time * HOUR_MS
        forcing = self._forcing(ratio)
        deleted = 0
        while deleted < DELETE_FILES_BATCH_MAX and len(queue.mapped_files) > 1:
            first = queue.mapped_files[0]
            end = first.file_from_offset + queue.mapped_file_size
            if end > self.deletable_end():
                break  # not yet flushed or dispatched: never delete what is only in memory
            expired = now >= _modified_ms(first) + reserved_ms
            if not (expired or forcing):
                break  # the oldest is kept, so every later one is too
            why = (reason or DeleteReason.EXPIRED) if expired else DeleteReason.FORCED
            queue.mapped_files.pop(0)  # readers in this process no longer find it
            self.release_below(end)
            if not await self._destroy(first, now, why):
                self.dying.append((first, why))
                break
            deleted += 1
            if not expired:
                ratio = await trio.to_thread.run_sync(store_disk_ratio, config)
                forcing = self._forcing(ratio)
            if config.delete_physic_files_interval > 0 and len(queue.mapped_files) > 1:
                await trio.sleep(config.delete_physic_files_interval / 1000)
        if deleted:  # DISK_FULL clears now, not at the next check
            self.on_disk_ratio(await trio.to_thread.run_sync(store_disk_ratio, config))
        return deleted

    async def _retry_dying(self, now: int) -> int:
        deleted = 0
        while self.dying:
            mapped_file, why = self.dying[0]
            if not await self._destroy(mapped_file, now, why):
                break
            self.dying.pop(0)
            deleted += 1
        return deleted

    async def _destroy(self, mapped_file: MappedFile, now: int, reason: DeleteReason) -> bool:
        """Delete `mapped_file` unless a reader uses it and the forcible interval has not passed
        since the deletion began; True when it is gone."""
        if mapped_file.destroy_started_ms is None:
            mapped_file.destroy_started_ms = now
        waited = now - mapped_file.destroy_started_ms
        name = mapped_file.file_name
        if mapped_file.in_use():
            if waited < self.config.destroy_mapped_file_interval_forcibly:
                if name not in self._deferred_logged:
                    self._deferred_logged.add(name)
                    log.info("segment_delete_deferred", file=name, reason="in use by a reader")
                return False
            log.warning("segment_deleted_while_in_use", file=name, waited_ms=waited)
        modified = _modified_ms(mapped_file)
        try:
            await trio.to_thread.run_sync(mapped_file.destroy)
        except OSError as exc:
            log.error("segment_delete_failed", file=name, error=str(exc))
            return False
        self._deferred_logged.discard(name)
        self.deleted[reason] += 1
        log.info(
            "segment_deleted",
            file=name,
            offset=mapped_file.file_from_offset,
            reason=reason.value,
            age_s=round((now - modified) / 1000, 1) if modified else None,
        )
        return True


def _modified_ms(mapped_file: MappedFile) -> int:
    """The segment file's last modification (RocketMQ's `getLastModifiedTimestamp`); 0 when it
    cannot be read, which makes it expired."""
    try:
        return os.fstat(mapped_file.fd).st_mtime_ns // 1_000_000
    except OSError:
        return 0


class CleanConsumeQueueService:
    """After the log's first offset moved: consume-queue files below it go, minimums move up,
    and so do the index files whose items all point below it."""

    def __init__(
        self,
        config: MessageStoreConfig,
        table: ConsumeQueueTable,
        min_offset: Callable[[], int],
        index: IndexService | None = None,
    ) -> None:
        self.config = config
        self.table = table
        self.min_offset = min_offset
        self.index = index
        self.files_deleted = 0
        self._last_min = 0

    async def run_round(self) -> int:
        """Clean every queue once if the log's first offset moved; files deleted."""
        phy_min = self.min_offset()
        if phy_min <= self._last_min:
            return 0
        self._last_min = phy_min
        interval_s = self.config.delete_consume_queue_files_interval / 1000
        deleted = 0
        for queue in list(self.table.queues.values()):
            count = queue.delete_expired_files(phy_min)
            queue.correct_min_offset(phy_min)
            deleted += count
            if count and interval_s > 0:
                await trio.sleep(interval_s)
            else:
                await trio.lowlevel.checkpoint()
        if self.index is not None:
            deleted += await trio.to_thread.run_sync(self.index.delete_below, phy_min)
        self.files_deleted += deleted
        return deleted


async def clean_files_periodically(
    commit_log: CleanCommitLogService,
    consume_queues: CleanConsumeQueueService | None,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Every `clean_resource_interval` ms, and at once after a manual request: a commit-log
    round, then a consume-queue round (RocketMQ's `cleanFilesPeriodically`). A failing round
    (an unreadable disk) is logged once per failing spell and tried again next time."""
    task_status.started()
    interval_s = commit_log.config.clean_resource_interval / 1000
    failing = False
    while True:
        # The first round one interval after the start (RocketMQ waits a minute): recovery's
        # own work is done first, and tests of a fresh store see no round they did not ask for.
        with trio.move_on_after(interval_s):
            await commit_log.requested.wait()
        commit_log.requested = trio.Event()
        try:
            await commit_log.run_round()
            if consume_queues is not None:
                await consume_queues.run_round()
        except OSError as exc:
            if not failing:
                log.error("clean_files_failed", error=str(exc))
            failing = True
        else:
            if failing:
                log.info("clean_files_recovered")
            failing = False
