"""The message index: RocketMQ 4.9's IndexFile by KEYS and UNIQ_KEY (`index_file`), the service
that builds, saves, repairs and deletes the files (`service`) and the queries a broker answers
with it (`query`)."""

from __future__ import annotations

from store.config import MessageStoreConfig
from store.index.service import IndexService


def open_index(
    config: MessageStoreConfig, log_min: int, log_max: int, abnormal: bool
) -> IndexService | None:
    """The store's index as `config` asks for it (None when `message_index_enable` is off)."""
    if not config.message_index_enable:
        return None
    return IndexService.open(
        config.store_path_root_dir,
        config.max_hash_slot_num,
        config.max_index_num,
        log_min=log_min,
        log_max=log_max,
        abnormal=abnormal,
    )
