"""The topic table: which topics exist, their queue counts and permissions, persisted as JSON.

`<store>/config/topics.json` has RocketMQ's shape (`TopicConfigSerializeWrapper`):
`{"dataVersion": {...}, "topicConfigTable": {name: {"topicName", "readQueueNums",
"writeQueueNums", "perm", "topicFilterType", "topicSysFlag", "order"}}}`, written to a temporary
file, fsynced and renamed, so a crash leaves the old table or the new one. Auto-creation follows
`TopicConfigManager.createTopicInSendMessageMethod` (4.9): a new topic inherits from a template
topic (`TBW102`) that carries the INHERIT permission. Knows nothing of sockets or the store.

Every path that creates a topic or a group for a peer (a SEND to an unknown topic, a send back's
`%RETRY%` and `%DLQ%` topics, a heartbeat's group and retry topic, a pull's group) goes through
`check_new_topic` or `check_new_group`, the one set of rules auto-creation obeys: the topic
rule a SEND's topic is held to (`protocol.names.check_topic_name`: TopicValidator's characters
and 127 characters, the commit log's limit too), at least one queue (RocketMQ 4.9 clamps a
negative count to 0 and creates a topic no send can use), a group whose `%RETRY%` and `%DLQ%`
topics obey the topic rule (so a group over 120 characters, whose retries could never be stored,
is refused before anything is created for it), and a table of at most
`auto_create_topic_max_num` topics or `auto_create_subscription_group_max_num` groups (what
exists, configured or created, is served as before). A refusal is a `HeaderFieldError` with the
code and remark to answer.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import structlog
import trio

from protocol import names
from protocol.admin_topic import TopicConfigData
from protocol.codes import ResponseCode
from protocol.errors import HeaderFieldError
from store.mapped_file import make_dirs

PERM_PRIORITY: Final = 8
PERM_READ: Final = 4
PERM_WRITE: Final = 2
PERM_INHERIT: Final = 1

AUTO_CREATE_TOPIC_KEY_TOPIC: Final = "TBW102"
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
TRANS_HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"
#: queues of a `%DLQ%<group>` topic (MixAll's DLQ_NUMS_PER_GROUP)
DLQ_NUMS_PER_GROUP: Final = 1
BENCHMARK_TOPIC: Final = "BenchmarkTest"
REPLY_TOPIC_POSTFIX: Final = "REPLY_TOPIC"
#: system topics producers may not send to (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET, 4.9)
NOT_ALLOWED_SEND_TOPICS: Final = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
#: the schedule topic's queues in its config, fixed as RocketMQ's SCHEDULE_TOPIC_QUEUE_NUM (the
#: delay levels themselves, one queue each, are the store's `message_delay_level`)
SCHEDULE_TOPIC_QUEUE_NUMS: Final = 18
#: how many topics, and groups, the tables may hold before auto-creation stops
AUTO_CREATE_TOPIC_MAX_NUM: Final = 10_000
AUTO_CREATE_SUBSCRIPTION_GROUP_MAX_NUM: Final = 10_000

log = structlog.get_logger()


def check_new_topic(topic: str, queue_nums: int, count: int, max_num: int) -> None:
    """`topic` may be created with `queue_nums` queues in a table of `count` topics, or
    `HeaderFieldError`: SYSTEM_ERROR for a name or count, TOPIC_NOT_EXIST past `max_num`."""
    names.check_topic_name("topic", topic)
    if queue_nums <= 0:
        raise HeaderFieldError(
            "topic", f"topic[{topic}] cannot be created with {queue_nums} queues: at least 1"
        )
    if count >= max_num:
        raise HeaderFieldError(
            "topic",
            f"topic[{topic}] not exist, and no more topics are created automatically: "
            f"this broker holds {count} (auto_create_topic_max_num)",
            ResponseCode.TOPIC_NOT_EXIST,
        )


def check_new_group(group: str, count: int, max_num: int) -> None:
    """`group` may be created in a table of `count` groups, or `HeaderFieldError`:
    SYSTEM_ERROR for a name `check_group_topics` refuses, SUBSCRIPTION_GROUP_NOT_EXIST past
    `max_num`."""
    check_group_topics(group)
    if count >= max_num:
        raise HeaderFieldError(
            "group",
            f"subscription group not exist, {group}, and no more groups are created "
            f"automatically: this broker holds {count} (auto_create_subscription_group_max_num)",
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
        )


def check_group_topics(group: str) -> None:
    """`group` is a group name whose `%RETRY%` and `%DLQ%` topics obey the topic rule, or
    `HeaderFieldError` (SYSTEM_ERROR): its retries could never be stored."""
    names.check_group_name("group", group)
    for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
        try:
            names.check_topic_name("group", prefix + group)
        except HeaderFieldError as exc:
            shown = group if len(group) <= 64 else group[:61] + "..."
            raise HeaderFieldError(
                "group",
                f"group[{shown}] of {len(group)} characters cannot be created: its topic "
                f"{prefix}<group> breaks the topic rule: {exc}",
            ) from None


@dataclass(frozen=True, slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def __str__(self) -> str:  # TopicConfig.toString(), quoted in remarks
        perm = (
            ("R" if self.perm & PERM_READ else "-")
            + ("W" if self.perm & PERM_WRITE else "-")
            + ("X" if self.perm & PERM_INHERIT else "-")
        )
        return (
            f"TopicConfig [topicName={self.topic_name}, readQueueNums={self.read_queue_nums}, "
            f"writeQueueNums={self.write_queue_nums}, perm={perm}, "
            f"topicFilterType={self.topic_filter_type}, topicSysFlag={self.topic_sys_flag}, "
            f"order={str(self.order).lower()}]"
        )

    def data(self) -> TopicConfigData:
        """The config as the admin bodies carry it (4.9's `TopicConfig` JSON)."""
        return TopicConfigData(
            self.topic_name,
            self.read_queue_nums,
            self.write_queue_nums,
            self.perm,
            self.topic_filter_type,
            self.topic_sys_flag,
            self.order,
        )

    def to_json(self) -> dict[str, Any]:
        return self.data().to_dict()

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicConfig:
        return cls(
            str(d["topicName"]),
            int(d.get("readQueueNums", 16)),
            int(d.get("writeQueueNums", 16)),
            int(d.get("perm", PERM_READ | PERM_WRITE)),
            str(d.get("topicFilterType", "SINGLE_TAG")),
            int(d.get("topicSysFlag", 0)),
            bool(d.get("order", False)),
        )


class JsonConfig(Protocol):
    def to_json(self) -> dict[str, Any]: ...


async def persist_table(
    path: Path | None,
    lock: trio.Lock,
    data_version: DataVersion,
    table_key: str,
    table: Mapping[str, JsonConfig],
) -> None:
    """Write a RocketMQ config table (`{"dataVersion": ..., table_key: {...}}`) atomically,
    off the event loop; `lock` serialises concurrent writers. No path: nothing is persisted."""
    if path is None:
        return
    async with lock:
        payload = {
            "dataVersion": data_version.to_json(),
            table_key: {name: config.to_json() for name, config in sorted(table.items())},
        }
        try:
            await trio.to_thread.run_sync(write_json_atomically, path, payload)
        except OSError as exc:
            # As upstream: the table stays in memory and the request that changed it goes on
            # (a full disk must not turn every send into an error); the next persist writes
            # the whole table again. One event per failing spell and file.
            if path not in _failing_paths:
                _failing_paths.add(path)
                log.error("config_persist_failed", file=str(path), error=str(exc))
            return
        if path in _failing_paths:
            _failing_paths.discard(path)
            log.info("config_persist_recovered", file=str(path))


_failing_paths: set[Path] = set()


def write_json_atomically(path: Path, payload: object) -> None:
    """Write `payload` as JSON to `path`: temp file in the same directory, fsync, rename, fsync
    of the directory (created durably when missing)."""
    make_dirs(str(path.parent))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=2, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class DataVersion:
    """RocketMQ's `DataVersion`: bumped on every change of a persisted table."""

    __slots__ = ("counter", "timestamp")

    def __init__(self) -> None:
        self.counter = 0
        self.timestamp = int(time.time() * 1000)

    def next(self) -> None:
        self.counter += 1
        self.timestamp = int(time.time() * 1000)

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}


class TopicConfigManager:
    """The topics of this broker; `path` None keeps them in memory only (tests)."""

    def __init__(
        self,
        path: Path | None,
        *,
        auto_create_topic_enable: bool = True,
        default_topic_queue_nums: int = 8,
        cluster_name: str = "DefaultCluster",
        broker_name: str = "broker-a",
        auto_create_topic_max_num: int = AUTO_CREATE_TOPIC_MAX_NUM,
    ) -> None:
        self.path = path
        self.auto_create_topic_max_num = auto_create_topic_max_num
        self.data_version = DataVersion()
        #: called after every change of the table (the name-server registration listens)
        self.listeners: list[Callable[[], None]] = []
        self._lock = trio.Lock()
        self._table: dict[str, TopicConfig] = {}
        for system in _system_topics(auto_create_topic_enable, default_topic_queue_nums):
            self._table[system.topic_name] = system
        # As RocketMQ's TopicConfigManager: the cluster topic keeps TopicConfig's default 16
        # queues, the broker topic has 1, the reply topic of request-reply messaging 1.
        everything = PERM_READ | PERM_WRITE | PERM_INHERIT
        self._table[cluster_name] = TopicConfig(cluster_name, perm=everything)
        self._table[broker_name] = TopicConfig(broker_name, 1, 1, everything)
        reply = f"{cluster_name}_{REPLY_TOPIC_POSTFIX}"
        self._table[reply] = TopicConfig(reply, 1, 1)
        if not auto_create_topic_enable:
            self._table.pop(AUTO_CREATE_TOPIC_KEY_TOPIC, None)
        if path is not None and path.exists():
            self._load(path, keep_template=auto_create_topic_enable)

    def _load(self, path: Path, *, keep_template: bool) -> None:
        data = json.loads(path.read_text(encoding="utf-8"))
        for name, entry in (data.get("topicConfigTable") or {}).items():
            if name == AUTO_CREATE_TOPIC_KEY_TOPIC and not keep_template:
                continue
            self._table[name] = TopicConfig.from_json(entry)
        version = data.get("dataVersion") or {}
        self.data_version.counter = int(version.get("counter", 0))

    def find(self, topic: str) -> TopicConfig | None:
        return self._table.get(topic)

    def topics(self) -> dict[str, TopicConfig]:
        return dict(self._table)

    def put(self, config: TopicConfig) -> None:
        """Create or replace a topic (admin path); call `persist()` afterwards."""
        self._table[config.topic_name] = config
        self._changed()

    def delete(self, topic: str) -> TopicConfig | None:
        """Remove a topic (admin path), returning its config; call `persist()` afterwards."""
        removed = self._table.pop(topic, None)
        if removed is not None:
            self._changed()
        return removed

    def create_in_send(
        self, topic: str, default_topic: str, client_queue_nums: int, topic_sys_flag: int
    ) -> TopicConfig | None:
        """Auto-create `topic` from the template `default_topic`, or None if it may not be.

        The template must exist and carry PERM_INHERIT; the new topic gets
        min(client's queue count, template's write queues) queues and the template's
        permissions without INHERIT. The caller persists. Raises `HeaderFieldError` when
        `check_new_topic` refuses it.
        """
        existing = self._table.get(topic)
        if existing is not None:
            return existing
        template = self._table.get(default_topic)
        if template is None:
            return None
        if not template.perm & PERM_INHERIT:
            return None
        queues = min(client_queue_nums, template.write_queue_nums)
        check_new_topic(topic, queues, len(self._table), self.auto_create_topic_max_num)
        created = TopicConfig(
            topic,
            queues,
            queues,
            template.perm & ~PERM_INHERIT,
            template.topic_filter_type,
            topic_sys_flag,
        )
        return self._add(created, default_topic)

    def create_in_send_back(
        self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int
    ) -> TopicConfig:
        """Create a retry or DLQ topic with fixed queues and permission (or return it).
        Raises `HeaderFieldError` when `check_new_topic` refuses it."""
        existing = self._table.get(topic)
        if existing is not None:
            return existing
        check_new_topic(topic, queue_nums, len(self._table), self.auto_create_topic_max_num)
        created = TopicConfig(topic, queue_nums, queue_nums, perm, "SINGLE_TAG", topic_sys_flag)
        return self._add(created, None)

    def _add(self, config: TopicConfig, template: str | None) -> TopicConfig:
        self._table[config.topic_name] = config
        self._changed()
        log.info(
            "topic_created",
            topic=config.topic_name,
            queues=config.write_queue_nums,
            perm=config.perm,
            template=template,
        )
        return config

    def _changed(self) -> None:
        self.data_version.next()
        for listener in self.listeners:
            listener()

    async def persist(self) -> None:
        """Write the table to `path` (off the event loop); concurrent calls are serialised."""
        await persist_table(
            self.path, self._lock, self.data_version, "topicConfigTable", self._table
        )


def _system_topics(auto_create: bool, default_queue_nums: int) -> list[TopicConfig]:
    rw = PERM_READ | PERM_WRITE
    topics = [
        TopicConfig("SELF_TEST_TOPIC", 1, 1, rw),
        TopicConfig("OFFSET_MOVED_EVENT", 1, 1, rw),
        TopicConfig(BENCHMARK_TOPIC, 1024, 1024, rw),
        TopicConfig(SCHEDULE_TOPIC, SCHEDULE_TOPIC_QUEUE_NUMS, SCHEDULE_TOPIC_QUEUE_NUMS, rw),
        TopicConfig(TRANS_HALF_TOPIC, 1, 1, rw),
    ]
    if auto_create:
        topics.append(
            TopicConfig(
                AUTO_CREATE_TOPIC_KEY_TOPIC,
                default_queue_nums,
                default_queue_nums,
                rw | PERM_INHERIT,
            )
        )
    return topics
