"""The dashboard's documents, computed from the broker's own tables; one function per document.

Every function here is synchronous and must run on the broker's event loop thread (the tables
change there, between awaits): the HTTP side hands them over with `broker.dashboard.http`'s
loop bridge. They read, never change, and return plain JSON-ready dicts:

| function | document | read from |
|---|---|---|
| `broker_status(server)` | `/api/broker.json` | config, listeners, table sizes |
| `topic_stats(broker, topic, ...)` | one topic of `/api/topics.json` | topics, consume queues |
| `topic_list(broker)` | `/api/topics.json` | every topic through `topic_stats` |
| `consume_stats(broker, group, ...)` | one group of `/api/groups.json` | offsets, queues |
| `group_list(broker)` | `/api/groups.json` | every group's totals through `consume_stats` |
| `group_detail(broker, group)` | `/api/group.json?group=G` | one group's queues, with times |
| `connection_list(server)` | `/api/connections.json` | open connections, client tables |
| `store_status(broker)` | `/api/store.json` | the store's offsets, segments, flags |

`topic_stats` and `consume_stats` turn the admin requests' own figures (`broker.admin.figures`:
what GET_TOPIC_STATS_INFO and GET_CONSUME_STATS answer per queue) into JSON; called without
`queue_limit` they list every queue with its time, as the admin bodies do. The rates
(`send_tps` of a topic and of a group's topics, a group's `consume_tps`) are the admin state's
sampler's, over the last `RATE_WINDOW_S` seconds. A store time costs two file reads (the
consume-queue unit, then the record): the lists read none, `group_detail` reads them for the
one group the page shows. `broker_status` shows the permission the broker has now
(WIPE_WRITE_PERM_OF_BROKER takes WRITE off it), not the configured one.

Output is bounded so the page can poll every 2 s: at most `MAX_TOPICS` topics, `MAX_GROUPS`
groups, `MAX_QUEUES` queues per topic or group and `MAX_CONNECTIONS` connections; a capped list
says how many it left out (`"omitted": n`). Nothing here reads the ACL table.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final, Protocol

from broker import __version__
from broker.admin import figures
from broker.admin.state import KeyRates
from broker.admin.topics import is_system_topic
from broker.metrics import RUNNING_FLAG_BITS
from broker.topic_config import (
    DLQ_GROUP_TOPIC_PREFIX,
    PERM_READ,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    TopicConfig,
)
from store.message_store import DefaultMessageStore

if TYPE_CHECKING:
    from broker.connection import Connection
    from broker.context import BrokerContext


class Served(Protocol):
    """What the pages read of the running server (`broker.server.Served`)."""

    @property
    def broker(self) -> BrokerContext: ...

    @property
    def addresses(self) -> list[tuple[str, int]]: ...

    @property
    def namesrv_addresses(self) -> list[tuple[str, int]]: ...

    @property
    def connections(self) -> Collection[Connection]: ...

    @property
    def refused_connections(self) -> int: ...


MAX_TOPICS: Final = 100
MAX_GROUPS: Final = 50
MAX_QUEUES: Final = 64
MAX_CONNECTIONS: Final = 200
SYSTEM_PREFIXES: Final = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX, "RMQ_SYS_")
#: the window of the rates the page shows (the admin state's sampler measures them)
RATE_WINDOW_S: Final = 10

Json = dict[str, Any]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _perm_text(perm: int) -> str:
    return ("R" if perm & PERM_READ else "-") + ("W" if perm & PERM_WRITE else "-")


def _is_system(broker: BrokerContext, topic: str) -> bool:
    """A topic the broker keeps for itself (the admin requests' system set), a retry or
    dead-letter topic."""
    return is_system_topic(broker.config, topic) or topic.startswith(SYSTEM_PREFIXES)


def _rates(broker: BrokerContext) -> KeyRates:
    """The sampler's rates over the page's window, taken once per document."""
    return broker.admin.stats.key_rates(RATE_WINDOW_S)


def _reader(kind: type) -> tuple[tuple[str, ...], attrgetter[Any]]:
    keys = tuple(field.name for field in fields(kind))
    return keys, attrgetter(*keys)


_TOPIC_QUEUE: Final = _reader(figures.TopicQueue)
_GROUP_QUEUE: Final = _reader(figures.GroupQueue)


def _row(row: figures.TopicQueue | figures.GroupQueue) -> Json:
    """A queue's figures under their own names (`dataclasses.asdict` copies deep: slow)."""
    keys, read = _TOPIC_QUEUE if isinstance(row, figures.TopicQueue) else _GROUP_QUEUE
    return dict(zip(keys, read(row), strict=True))


def _capped(items: list[Json], limit: int) -> tuple[list[Json], int]:
    return items[:limit], max(0, len(items) - limit)


def broker_status(server: Served) -> Json:
    """Who this broker is and how it runs: names, addresses, role, permission, table sizes."""
    broker = server.broker
    config = broker.config
    return {
        "now_ms": _now_ms(),
        "version": __version__,
        "cluster": config.broker_cluster_name,
        "broker_name": config.broker_name,
        "broker_addr": broker.addr,
        "listen": [f"{host}:{port}" for host, port in server.addresses],
        "namesrv_listen": [f"{host}:{port}" for host, port in server.namesrv_addresses],
        "role": config.store.broker_role.name,
        "flush_disk_type": config.store.flush_disk_type.name,
        "permission": _perm_text(broker.admin.broker_permission(config.broker_permission)),
        "acl_enable": config.acl_enable,
        "topics": len(broker.topics.topics()),
        "consumer_groups": broker.consumers.group_count,
        "producer_groups": broker.producers.group_count(),
        "connections": len(server.connections),
        "refused_connections": server.refused_connections,
    }


def topic_stats(
    broker: BrokerContext,
    topic: str,
    queue_limit: int | None = None,
    *,
    times: bool = True,
    rates: KeyRates | None = None,
) -> Json | None:
    """One topic's queues as GET_TOPIC_STATS_INFO counts them (`figures.topic_queues`: its
    write queues' min and max offset, the store time of the last message, 0 when empty) and
    its send rate; None if unknown. With `queue_limit`, only that many queues are listed (and
    read for their time); the totals count them all. `times=False` reads no time (0)."""
    config = broker.topics.find(topic)
    if config is None:
        return None
    queues = figures.topic_queues(broker, config)
    shown = queues if queue_limit is None else queues[:queue_limit]
    if times:
        figures.read_topic_times(broker, topic, shown)
    return {
        **_topic_config(broker, config),
        "messages": sum(q.max_offset - q.min_offset for q in queues),
        "max_offset_total": sum(q.max_offset for q in queues),
        "send_tps": round(figures.send_tps(rates or _rates(broker), (topic,)), 2),
        "queues": [_row(q) for q in shown],
        "queues_omitted": len(queues) - len(shown),
    }


def _topic_config(broker: BrokerContext, config: TopicConfig) -> Json:
    return {
        "topic": config.topic_name,
        "read_queues": config.read_queue_nums,
        "write_queues": config.write_queue_nums,
        "perm": _perm_text(config.perm),
        "order": config.order,
        "system": _is_system(broker, config.topic_name),
    }


def topic_list(broker: BrokerContext) -> Json:
    """Every topic (user topics first, then by name), each as `topic_stats` has it."""
    names = sorted(broker.topics.topics(), key=lambda name: (_is_system(broker, name), name))
    shown = names[:MAX_TOPICS]
    rates = _rates(broker)
    topics = [
        stats
        for name in shown
        if (stats := topic_stats(broker, name, MAX_QUEUES, times=False, rates=rates)) is not None
    ]
    return {
        "now_ms": _now_ms(),
        "topics": topics,
        "omitted": len(names) - len(shown),
        "limit": MAX_TOPICS,
    }


def consume_stats(
    broker: BrokerContext,
    group: str,
    queue_limit: int | None = None,
    *,
    times: bool = True,
    rates: KeyRates | None = None,
) -> Json:
    """`group`'s progress as GET_CONSUME_STATS counts it (`figures.group_queues`: per readable
    queue of each of its topics the broker offset, the consumer offset, the store time of the
    last consumed message), with the topics its live clients subscribe to but have not
    committed in yet; `lag` is the offsets' difference. Its send rate (of its topics) and
    consume rate. With `queue_limit`, only that many queues are listed (and read for their
    time); the totals count them all. `times=False` reads no time (0)."""
    rates = rates or _rates(broker)
    topics = figures.group_topics(broker, group, uncommitted=True)
    rows = figures.group_queues(broker, group, topics)
    shown = rows if queue_limit is None else rows[:queue_limit]
    if times:
        figures.read_consumed_times(broker, shown)
    info = broker.consumers.group_info(group)
    return {
        "group": group,
        "topics": sorted({row.topic for row in rows}),
        "clients": len(info.clients) if info is not None else 0,
        "lag": sum(row.lag for row in rows),
        "broker_offset_total": sum(row.broker_offset for row in rows),
        "consumer_offset_total": sum(row.consumer_offset for row in rows),
        "send_tps": round(figures.send_tps(rates, topics), 2),
        "consume_tps": round(figures.consume_tps(broker, rates, group, topics), 2),
        "queues": [{**_row(row), "lag": row.lag} for row in shown],
        "queues_omitted": len(rows) - len(shown),
    }


def _group_names(broker: BrokerContext) -> list[str]:
    return sorted(set(broker.offsets.group_names()) | set(broker.consumers.group_table()))


def group_list(broker: BrokerContext) -> Json:
    """Every consumer group with committed offsets or live clients: `consume_stats`'s totals,
    no queue listed (`group_detail` lists them for one group)."""
    names = _group_names(broker)
    shown = names[:MAX_GROUPS]
    rates = _rates(broker)
    return {
        "now_ms": _now_ms(),
        "groups": [consume_stats(broker, name, 0, times=False, rates=rates) for name in shown],
        "omitted": len(names) - len(shown),
        "limit": MAX_GROUPS,
    }


def group_detail(broker: BrokerContext, group: str) -> Json | None:
    """One group as `consume_stats` has it, its first `MAX_QUEUES` queues listed with their
    times; None when no group of that name committed an offset or has a live client."""
    if group not in _group_names(broker):
        return None
    return {"now_ms": _now_ms(), **consume_stats(broker, group, MAX_QUEUES)}


def connection_list(server: Served) -> Json:
    """Open client connections with what their heartbeats registered (groups, client ids)."""
    broker = server.broker
    consumers: dict[int, list[str]] = {}
    for group, info in broker.consumers.group_table().items():
        for client_id, client in info.clients.items():
            consumers.setdefault(client.conn_id, []).append(f"{group} ({client_id})")
    producers: dict[int, list[str]] = {}
    for group, channels in broker.producers.group_table().items():
        for conn_id in channels:
            producers.setdefault(conn_id, []).append(group)
    rows = [
        {
            "id": connection.conn_id,
            "remote": connection.ctx.remote_text,
            "requests": connection.requests,
            "inflight": connection.inflight,
            "consumer_groups": sorted(consumers.get(connection.conn_id, [])),
            "producer_groups": sorted(producers.get(connection.conn_id, [])),
        }
        for connection in sorted(server.connections, key=lambda c: c.conn_id)
    ]
    shown, omitted = _capped(rows, MAX_CONNECTIONS)
    return {"now_ms": _now_ms(), "connections": shown, "omitted": omitted}


def store_status(broker: BrokerContext) -> Json:
    """The commit log: segments, min/written/flushed offsets, disk ratio, the running flags."""
    store = broker.store
    if not isinstance(store, DefaultMessageStore):  # a test double: nothing to show
        return {"now_ms": _now_ms()}
    bits = store.running_flags.flag_bits
    return {
        "now_ms": _now_ms(),
        "segments": store.segment_count,
        "segment_size": store.config.mapped_file_size_commit_log,
        "min_offset": store.min_offset,
        "written_offset": store.max_offset,
        "flushed_offset": store.flushed_where,
        "unflushed_bytes": max(0, store.max_offset - store.flushed_where),
        "disk_ratio": round(store.disk_ratio, 4),
        "writer_queue_depth": store.writer_queue_depth,
        "writeable": store.running_flags.is_writeable(),
        "flags": sorted(name for name, bit in RUNNING_FLAG_BITS.items() if bits & bit),
        "segments_deleted": store.segments_deleted,
    }
