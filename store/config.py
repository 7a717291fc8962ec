"""Store configuration: `MessageStoreConfig` (RocketMQ 4.9 `MessageStoreConfig` in snake_case).

Owns the store's tunables and their validation; built once by the broker and passed down. Knows
no environment variables, files or flags: `broker/config.py` layers those.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, fields
from typing import Final

GIB: Final = 1 << 30
MIB: Final = 1 << 20
OS_PAGE_SIZE: Final = 4096
#: RocketMQ 4.9's `messageDelayLevel`: the delay of each level, level 1 first
DEFAULT_MESSAGE_DELAY_LEVEL: Final = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_DELAY_UNITS_MS: Final = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class FlushDiskType(enum.Enum):
    """When a put is acknowledged: after the append (ASYNC) or after a flush covered it (SYNC)."""

    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(enum.Enum):
    """The broker's replication role; a SLAVE refuses puts."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


@dataclass(frozen=True, slots=True)
class MessageStoreConfig:
    """Every knob of the commit-log store; defaults are RocketMQ 4.9.7's."""

    store_path_root_dir: str = os.path.join(os.path.expanduser("~"), "store")
    mapped_file_size_commit_log: int = GIB
    #: one consume-queue file: 300,000 units of 20 bytes, as RocketMQ's
    mapped_file_size_consume_queue: int = 300_000 * 20
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    sync_flush_timeout_ms: int = 5000
    flush_interval_commit_log_ms: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval_ms: int = 10000
    flush_commit_log_timed: bool = True
    commit_interval_commit_log_ms: int = 200
    commit_commit_log_least_pages: int = 4
    commit_commit_log_thorough_interval_ms: int = 200
    transient_store_pool_enable: bool = False
    transient_store_pool_size: int = 5
    max_message_size: int = 4 * MIB
    os_page_cache_busy_timeout_ms: int = 1000
    disk_max_used_space_ratio: int = 75
    disk_space_warning_level_ratio: float = 0.90
    #: DISK_FULL, once set, clears only below this ratio, so a disk hovering at the warning
    #: level does not flip the store between writeable and not
    disk_space_clean_forcibly_ratio: float = 0.85
    disk_check_interval_ms: int = 10000
    # Retention (RocketMQ's names; `file_reserved_time` in hours, fractions allowed, the
    # intervals in ms, as in RocketMQ's broker.conf).
    #: a segment last modified longer ago than this is expired
    file_reserved_time: float = 72.0
    #: the hours of day (`;`-separated, 0-23) at which expired segments are deleted
    delete_when: str = "04"
    #: above the clean-forcibly ratio, delete the oldest segments even when not expired
    clean_file_forcibly_enable: bool = True
    delete_physic_files_interval: int = 100
    delete_consume_queue_files_interval: int = 100
    #: a segment still read after this long since its deletion began is deleted anyway
    destroy_mapped_file_interval_forcibly: int = 120_000
    redelete_hanged_file_interval: int = 120_000
    clean_resource_interval: int = 10_000
    check_crc_on_recover: bool = True
    recover_truncate_corrupt: bool = False
    warm_mapped_file_enable: bool = False
    put_queue_capacity: int = 10000
    max_group_size: int = 512
    slow_put_threshold_ms: int = 500
    allocate_retry_interval_ms: int = 1000
    checkpoint_interval_ms: int = 1000
    #: consume-queue files open at once, over every queue (least recently used closed first)
    max_open_consume_queue_files: int = 512
    # The message index (`store.index`): by KEYS and UNIQ_KEY, for QUERY_MESSAGE.
    #: build the index at all
    message_index_enable: bool = True
    #: hash slots of one index file
    max_hash_slot_num: int = 5_000_000
    #: items one index file holds before the next file is started
    max_index_num: int = 20_000_000
    #: the delay levels a message may ask for (DELAY property, a consumer's send-back):
    #: space-separated, each a whole number and a unit, s, m, h or d; level 1 is the first
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL
    # Replication (4.9's HA settings; the master's listen port and address are the broker's).
    #: ms between a slave's offset reports and between a master's heartbeat frames
    ha_send_heartbeat_interval: int = 5000
    #: most commit-log bytes in one transfer frame
    ha_transfer_batch_size: int = 32 * 1024
    #: SYNC_MASTER answers SLAVE_NOT_AVAILABLE when the slave is this many bytes behind or more
    ha_slave_fallbehind_max: int = 256 * MIB
    #: ms without a byte from the peer after which an HA connection is closed
    ha_housekeeping_interval: int = 20_000
    #: a pull whose last message lies more than this share (%) of the machine's memory behind
    #: the log's end is told to read from a slave (when the broker allows slave reads)
    access_message_in_memory_max_ratio: int = 40

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                raise ValueError(f"{f.name} must not be negative, got {value}")
        if not self.store_path_root_dir:
            raise ValueError("store_path_root_dir must not be empty")
        size = self.mapped_file_size_commit_log
        if size < OS_PAGE_SIZE or size % OS_PAGE_SIZE:
            raise ValueError(f"mapped_file_size_commit_log must be a multiple of 4096, got {size}")
        if size >= 1 << 31:
            raise ValueError("mapped_file_size_commit_log must fit a Java int (< 2 GiB)")
        cq_size = self.mapped_file_size_consume_queue
        if cq_size < 20 or cq_size % 20:
            raise ValueError(
                f"mapped_file_size_consume_queue must be a positive multiple of 20, got {cq_size}"
            )
        self._check_positive(
            "sync_flush_timeout_ms",
            "flush_interval_commit_log_ms",
            "commit_interval_commit_log_ms",
            "max_message_size",
            "put_queue_capacity",
            "max_group_size",
            "transient_store_pool_size",
            "disk_check_interval_ms",
            "allocate_retry_interval_ms",
            "checkpoint_interval_ms",
            "os_page_cache_busy_timeout_ms",
            "clean_resource_interval",
            "max_open_consume_queue_files",
            "max_hash_slot_num",
            "ha_send_heartbeat_interval",
            "ha_transfer_batch_size",
            "ha_slave_fallbehind_max",
            "ha_housekeeping_interval",
        )
        if self.ha_transfer_batch_size > 4 * MIB:
            raise ValueError("ha_transfer_batch_size must be at most 4 MiB (a slave's read bound)")
        if self.max_index_num < 2:
            raise ValueError(f"max_index_num must be at least 2, got {self.max_index_num}")
        if not self.file_reserved_time > 0:
            hours = self.file_reserved_time
            raise ValueError(f"file_reserved_time must be a positive number of hours, got {hours}")
        self.delete_hours()  # raises ValueError naming delete_when
        self.delay_levels_ms()  # raises ValueError naming message_delay_level
        if not 10 <= self.disk_max_used_space_ratio <= 95:
            raise ValueError("disk_max_used_space_ratio must be within 10..95")
        if not 0.0 < self.disk_space_warning_level_ratio <= 1.0:
            raise ValueError("disk_space_warning_level_ratio must be within (0, 1]")
        if not 0.0 < self.disk_space_clean_forcibly_ratio <= 1.0:
            raise ValueError("disk_space_clean_forcibly_ratio must be within (0, 1]")
        if not isinstance(self.flush_disk_type, FlushDiskType):
            raise ValueError(
                f"flush_disk_type must be a FlushDiskType, got {self.flush_disk_type!r}"
            )
        if not isinstance(self.broker_role, BrokerRole):
            raise ValueError(f"broker_role must be a BrokerRole, got {self.broker_role!r}")

    def delete_hours(self) -> frozenset[int]:
        """The hours of `delete_when` (RocketMQ's `UtilAll.isItTimeToDo` form: "04", "1;13")."""
        hours: set[int] = set()
        for part in self.delete_when.split(";"):
            text = part.strip()
            if not (text.isascii() and text.isdigit() and int(text) < 24):
                raise ValueError(
                    f"delete_when must list hours of the day 0-23 separated by ';', "
                    f"got {self.delete_when!r}"
                )
            hours.add(int(text))
        return frozenset(hours)

    def delay_levels_ms(self) -> tuple[int, ...]:
        """The delay of each level in ms, level 1 first (RocketMQ's `parseDelayLevel`)."""
        levels = []
        for part in self.message_delay_level.split():
            number, unit = part[:-1], _DELAY_UNITS_MS.get(part[-1:])
            if unit is None or not (number.isascii() and number.isdigit()) or int(number) == 0:
                raise ValueError(
                    "message_delay_level must list delays such as 1s, 5m, 2h or 1d separated "
                    f"by spaces, got {part!r} in {self.message_delay_level!r}"
                )
            levels.append(int(number) * unit)
        if not levels:
            raise ValueError("message_delay_level must list at least one delay")
        return tuple(levels)

    def _check_positive(self, *names: str) -> None:
        for name in names:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    @property
    def store_path_commit_log(self) -> str:
        return os.path.join(self.store_path_root_dir, "commitlog")

    @property
    def transient_store_pool_effective(self) -> bool:
        """The write-buffer mode runs only with ASYNC_FLUSH on a master (RocketMQ's rule)."""
        return (
            self.transient_store_pool_enable
            and self.flush_disk_type is FlushDiskType.ASYNC_FLUSH
            and self.broker_role is not BrokerRole.SLAVE
        )
