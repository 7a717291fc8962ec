"""The subscription-group table: retry limits of consumer groups, persisted as JSON.

The send path needs a group's `retryMaxTimes` to decide whether a message sent to
`%RETRY%<group>` goes to the dead-letter topic instead. Groups are created when a consumer
heartbeat, a pull, a send back or a retry-topic send names them (`autoCreateSubscriptionGroup`,
default true), as RocketMQ's `SubscriptionGroupManager` does. Stored as
`<store>/config/subscriptionGroup.json` in RocketMQ's shape, written atomically.
"""

from __future__ import annotations

import json
from pathlib import Path

import structlog
import trio

from broker.topic_config import (
    AUTO_CREATE_SUBSCRIPTION_GROUP_MAX_NUM,
    DataVersion,
    check_new_group,
    persist_table,
)
from protocol.admin_group import DEFAULT_RETRY_MAX_TIMES, SubscriptionGroupConfig

__all__ = ["DEFAULT_RETRY_MAX_TIMES", "SubscriptionGroupConfig", "SubscriptionGroupManager"]

log = structlog.get_logger()


class SubscriptionGroupManager:
    """Consumer groups known to this broker; `path` None keeps them in memory only."""

    def __init__(
        self,
        path: Path | None,
        *,
        auto_create: bool = True,
        max_num: int = AUTO_CREATE_SUBSCRIPTION_GROUP_MAX_NUM,
    ) -> None:
        self.path = path
        self.auto_create = auto_create
        self.max_num = max_num
        self.data_version = DataVersion()
        self._lock = trio.Lock()
        self._table: dict[str, SubscriptionGroupConfig] = {}
        if path is not None and path.exists():
            data = json.loads(path.read_text(encoding="utf-8"))
            for name, entry in (data.get("subscriptionGroupTable") or {}).items():
                self._table[name] = SubscriptionGroupConfig.from_json(entry)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        return self._table.get(group)

    def put(self, config: SubscriptionGroupConfig) -> None:
        self._table[config.group_name] = config
        self.data_version.next()

    def delete(self, group: str) -> SubscriptionGroupConfig | None:
        """Forget `group`; what it was, or None when unknown."""
        config = self._table.pop(group, None)
        if config is not None:
            self.data_version.next()
        return config

    def table(self) -> dict[str, SubscriptionGroupConfig]:
        """A copy of the table, group name -> config."""
        return dict(self._table)

    def ensure(self, group: str) -> bool:
        """Create `group` with defaults if unknown and auto-creation is on; True if created.
        Raises `HeaderFieldError` when `check_new_group` refuses it."""
        if group in self._table or not self.auto_create:
            return False
        check_new_group(group, len(self._table), self.max_num)
        self.put(SubscriptionGroupConfig(group))
        log.info("subscription_group_created", group=group)
        return True

    async def find_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        """`find`, creating (and persisting) an unknown group first when auto-creation is on,
        as RocketMQ's `findSubscriptionGroupConfig` does for sends, pulls and sends back."""
        if self.ensure(group):
            await self.persist()
        return self.find(group)

    async def persist(self) -> None:
        await persist_table(
            self.path, self._lock, self.data_version, "subscriptionGroupTable", self._table
        )
