"""MessageStoreConfig defaults (RocketMQ 4.9.7) and validation that names the field."""

from __future__ import annotations

import dataclasses

import pytest

from store.config import BrokerRole, FlushDiskType, MessageStoreConfig


def test_defaults_are_rocketmq_4_9() -> None:
    config = MessageStoreConfig(store_path_root_dir="/data/store")
    assert config.mapped_file_size_commit_log == 1 << 30
    assert config.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert config.broker_role is BrokerRole.ASYNC_MASTER
    assert (config.sync_flush_timeout_ms, config.flush_interval_commit_log_ms) == (5000, 500)
    assert (config.flush_commit_log_least_pages, config.flush_commit_log_thorough_interval_ms) == (
        4,
        10000,
    )
    assert config.max_message_size == 4 * 1024 * 1024
    assert config.store_path_commit_log == "/data/store/commitlog"
    assert not config.transient_store_pool_effective


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("mapped_file_size_commit_log", 1000),
        ("mapped_file_size_commit_log", 1 << 31),
        ("mapped_file_size_consume_queue", 30),
        ("mapped_file_size_consume_queue", 0),
        ("sync_flush_timeout_ms", 0),
        ("put_queue_capacity", 0),
        ("max_group_size", -1),
        ("disk_max_used_space_ratio", 99),
        ("disk_space_warning_level_ratio", 1.5),
        ("flush_disk_type", "SYNC_FLUSH"),
        ("store_path_root_dir", ""),
    ],
)
def test_invalid_values_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(MessageStoreConfig(store_path_root_dir="/s"), **{field: value})  # type: ignore[arg-type]


def test_write_buffer_mode_needs_async_flush_on_a_master() -> None:
    config = MessageStoreConfig(store_path_root_dir="/s", transient_store_pool_enable=True)
    assert config.transient_store_pool_effective
    sync = dataclasses.replace(config, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    assert not sync.transient_store_pool_effective
