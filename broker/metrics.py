"""Prometheus metrics of the broker: one registry per broker and the /metrics HTTP endpoint.

This module owns the metric names, their labels and buckets, and the scrape-time collector that
reads the store's gauges. It knows nothing of sockets, request codes or the store's internals: the
broker calls the `record_*` methods from its send path and connection tasks, and hands the store
over as a `StoreStatsProvider`, a structural type that `DefaultMessageStore` (or a thin adapter
around it) satisfies. Each `BrokerMetrics` owns its own `CollectorRegistry`, so two brokers in one
process (as in the tests) never share counters.

Exposed families (all prefixed `rmq_broker_`):

| name | type | labels |
|---|---|---|
| `put_messages_total`, `put_bytes_total` | counter | topic, status |
| `put_latency_seconds`, `flush_latency_seconds` | histogram | |
| `system_busy_total` | counter | reason |
| `open_connections` | gauge | |
| `connections_refused_total` | counter | |
| `store_writer_queue_depth`, `store_segments` | gauge (scrape time) | |
| `store_written_offset_bytes`, `store_flushed_offset_bytes` | gauge (scrape time) | |
| `store_flag` | gauge (scrape time) | flag |
| `store_writeable` | gauge (scrape time) | |
| `store_min_offset_bytes`, `store_disk_used_ratio` | gauge (scrape time) | |
| `store_segments_deleted_total` | counter (scrape time) | reason |
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final, Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from store import status
from store.status import RunningFlags

NAMESPACE: Final = "rmq_broker"

# From 100 us to half a second: a page-cache hit up to a busy group commit.
_SUBSECOND: Final[tuple[float, ...]] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
)
# Put latency is the whole path from the decoded request to the store's answer, so under
# SYNC_FLUSH it includes the group commit: the buckets reach the 5 s sync flush timeout.
PUT_LATENCY_BUCKETS: Final = (*_SUBSECOND, 1.0, 2.5, 5.0, 10.0)
# One msync/fdatasync of a dirty range: sub-millisecond on a page-cache hit, seconds on a sick disk.
FLUSH_LATENCY_BUCKETS: Final = (*_SUBSECOND, 1.0, 5.0)

# The store's RunningFlags bits (store.status), exported one labelled gauge each.
RUNNING_FLAG_BITS: Final = {
    "not_readable": status.NOT_READABLE,
    "not_writeable": status.NOT_WRITEABLE,
    "write_logics_queue_error": status.WRITE_LOGICS_QUEUE_ERROR,
    "write_index_file_error": status.WRITE_INDEX_FILE_ERROR,
    "disk_full": status.DISK_FULL,
    "create_mapped_file_failed": status.CREATE_MAPPED_FILE_FAILED,
}


#: put statuses under which the message was stored
STORED_STATUSES: Final = frozenset(
    {"PUT_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"}
)

#: why retention deleted a segment (store.cleanup.DeleteReason values)
DELETE_REASONS: Final = ("expired", "forced", "manual")


class RunningFlagsView(Protocol):
    """The part of `store.status.RunningFlags` a scrape reads."""

    @property
    def flag_bits(self) -> int: ...

    def is_writeable(self) -> bool: ...


class StoreStatsProvider(Protocol):
    """What a scrape reads from the store; every property must be cheap and never block."""

    @property
    def max_offset(self) -> int:
        """Physical offset one past the last appended byte (written, maybe not flushed)."""
        ...

    @property
    def flushed_where(self) -> int:
        """Physical offset up to which the commit log is durable."""
        ...

    @property
    def segment_count(self) -> int:
        """Number of commit-log segment files."""
        ...

    @property
    def writer_queue_depth(self) -> int:
        """Puts waiting in the writer task's channel (`statistics().current_buffer_used`)."""
        ...

    @property
    def running_flags(self) -> RunningFlagsView | int:
        """The store's `RunningFlags`, or its bare `flag_bits`."""
        ...

    @property
    def min_offset(self) -> int:
        """Physical offset of the oldest byte still stored (retention moves it up)."""
        ...

    @property
    def disk_ratio(self) -> float:
        """Used share of the store's disk at the last check (0..1)."""
        ...

    @property
    def segments_deleted(self) -> Mapping[str, int]:
        """Segments retention deleted so far, by reason (expired, forced, manual)."""
        ...


class _StoreCollector(Collector):
    """Reads the store's gauges when Prometheus scrapes, so the writer pays nothing for them."""

    def __init__(self, provider: StoreStatsProvider) -> None:
        self._provider = provider

    def collect(self) -> Iterator[Metric]:
        store = self._provider
        yield _gauge(
            "store_writer_queue_depth",
            "Puts waiting for the writer task.",
            store.writer_queue_depth,
        )
        yield _gauge(
            "store_written_offset_bytes", "Commit-log offset appended so far.", store.max_offset
        )
        yield _gauge(
            "store_flushed_offset_bytes", "Commit-log offset known durable.", store.flushed_where
        )
        yield _gauge("store_segments", "Commit-log segment files.", store.segment_count)
        bits, writeable = _flag_state(store.running_flags)
        flags = GaugeMetricFamily(
            f"{NAMESPACE}_store_flag", "RunningFlags bits: 1 while set.", labels=["flag"]
        )
        for name, bit in RUNNING_FLAG_BITS.items():
            flags.add_metric([name], 1.0 if bits & bit else 0.0)
        yield flags
        yield _gauge("store_writeable", "1 while the store accepts writes.", float(writeable))
        yield _gauge(
            "store_min_offset_bytes",
            "Commit-log offset of the oldest stored byte.",
            store.min_offset,
        )
        yield _gauge(
            "store_disk_used_ratio", "Used share of the store's disk (0..1).", store.disk_ratio
        )
        deleted = CounterMetricFamily(
            f"{NAMESPACE}_store_segments_deleted",
            "Commit-log segments deleted by retention, by reason.",
            labels=["reason"],
        )
        counts = store.segments_deleted
        for reason in DELETE_REASONS:
            deleted.add_metric([reason], counts.get(reason, 0))
        yield deleted

    def describe(self) -> Iterator[Metric]:
        # Registering must not touch the store (it may be closed by then): describe without values.
        return iter(())


class _PutCollector(Collector):
    """The put counters and the put latency histogram as plain numbers, turned into metric
    families when Prometheus scrapes.

    Every send updates them, so they cost a dict hit, two additions and a bisect there: a
    prometheus_client child takes a lock per update. Only the event loop's thread writes. A
    new (topic, status) key and the scrape's copy of the table take `_keys_lock`: copying a
    dict allocates, a collection may run Python code and switch threads, and an insert then
    would break the copy. Updates to existing counters and the fixed-size histogram need no
    lock: the scrape copies them as they are.
    """

    def __init__(self) -> None:
        #: (topic, status name) -> [messages, body bytes]
        self.puts: dict[tuple[str, str], list[int]] = {}
        self._keys_lock = threading.Lock()
        #: per bucket of PUT_LATENCY_BUCKETS, then +Inf (not cumulative)
        self.latency_counts = [0] * (len(PUT_LATENCY_BUCKETS) + 1)
        self.latency_sum = 0.0

    def record(
        self, topic: str, status_name: str, body_bytes: int, latency_s: float, messages: int
    ) -> None:
        counts = self.puts.get((topic, status_name))
        if counts is None:
            with self._keys_lock:
                counts = self.puts[(topic, status_name)] = [0, 0]
        counts[0] += messages
        counts[1] += body_bytes
        self.latency_counts[bisect_left(PUT_LATENCY_BUCKETS, latency_s)] += 1
        self.latency_sum += latency_s

    def collect(self) -> Iterator[Metric]:
        with self._keys_lock:
            puts = list(self.puts.items())
        messages = CounterMetricFamily(
            f"{NAMESPACE}_put_messages",
            "Messages put, by topic and PutMessageStatus.",
            labels=["topic", "status"],
        )
        body_bytes = CounterMetricFamily(
            f"{NAMESPACE}_put_bytes",
            "Body bytes put, by topic and PutMessageStatus.",
            labels=["topic", "status"],
        )
        for (topic, status_name), (count, size) in puts:
            messages.add_metric([topic, status_name], count)
            body_bytes.add_metric([topic, status_name], size)
        yield messages
        yield body_bytes
        counts = list(self.latency_counts)
        cumulative = 0
        buckets = []
        for bound, count in zip((*map(repr, PUT_LATENCY_BUCKETS), "+Inf"), counts, strict=True):
            cumulative += count
            buckets.append((bound, float(cumulative)))
        yield HistogramMetricFamily(
            f"{NAMESPACE}_put_latency_seconds",
            "Send request decoded to store answer.",
            buckets=buckets,
            sum_value=self.latency_sum,
        )

    def describe(self) -> Iterator[Metric]:
        return iter(())


def _flag_state(flags: RunningFlagsView | int) -> tuple[int, bool]:
    """(bits, writeable); bare bits are judged by the store's own rule, not a copy of it."""
    if isinstance(flags, int):
        view = RunningFlags()
        view.flag_bits = flags
        return flags, view.is_writeable()
    return flags.flag_bits, flags.is_writeable()


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{NAMESPACE}_{name}", documentation, value=float(value))


class BrokerMetrics:
    """The broker's metrics; the `record_*` methods are cheap enough for the send path.

    The put figures, updated on every send, are plain numbers (`_PutCollector`); the rare
    events use prometheus_client's metrics, their labelled children cached per label.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        reg = self.registry
        self._puts = _PutCollector()
        reg.register(self._puts)
        self._flush_latency = Histogram(
            "flush_latency_seconds",
            "One msync/fdatasync of the commit log.",
            namespace=NAMESPACE,
            registry=reg,
            buckets=FLUSH_LATENCY_BUCKETS,
        )
        self._busy = Counter(
            "system_busy",
            "SYSTEM_BUSY answers, by reason (queue_full, writer_stuck, ...).",
            ["reason"],
            namespace=NAMESPACE,
            registry=reg,
        )
        self._connections = Gauge(
            "open_connections", "Client connections open now.", namespace=NAMESPACE, registry=reg
        )
        self._refused = Counter(
            "connections_refused",
            "Connections closed at once: max_connections were open.",
            namespace=NAMESPACE,
            registry=reg,
        )
        self._busy_children: dict[str, Counter] = {}
        self._store_collector: _StoreCollector | None = None

    def attach_store(self, provider: StoreStatsProvider) -> None:
        """Export the store's gauges from now on; attaching another store replaces the first."""
        self.detach_store()
        self._store_collector = _StoreCollector(provider)
        self.registry.register(self._store_collector)

    def detach_store(self) -> None:
        """Stop reading the store (call before closing it)."""
        if self._store_collector is not None:
            self.registry.unregister(self._store_collector)
            self._store_collector = None

    def record_put(
        self, topic: str, status: str, body_bytes: int, latency_s: float, messages: int = 1
    ) -> None:
        """Count one put (a batch counts `messages`) and its latency; status is the enum name."""
        self._puts.record(topic, status, body_bytes, latency_s, messages)

    def stored_messages(self) -> int:
        """Messages stored so far: puts answered with a status that stored them."""
        return sum(self.stored_by_topic().values())

    def stored_by_topic(self) -> dict[str, int]:
        """Messages stored so far in each topic (the send rate's count)."""
        with self._puts._keys_lock:
            puts = list(self._puts.puts.items())
        stored: dict[str, int] = {}
        for (topic, status_name), counts in puts:
            if status_name in STORED_STATUSES:
                stored[topic] = stored.get(topic, 0) + counts[0]
        return stored

    def record_flush(self, latency_s: float) -> None:
        """Observe the duration of one flush of the commit log."""
        self._flush_latency.observe(latency_s)

    def record_system_busy(self, reason: str) -> None:
        """Count one SYSTEM_BUSY answer; the reason names which limit was really hit."""
        child = self._busy_children.get(reason)
        if child is None:
            child = self._busy_children[reason] = self._busy.labels(reason)
        child.inc()

    def connection_opened(self) -> None:
        self._connections.inc()

    def connection_closed(self) -> None:
        self._connections.dec()

    def connection_refused(self) -> None:
        self._refused.inc()


@dataclass(frozen=True, slots=True)
class MetricsServer:
    """A running /metrics endpoint; `port` is the bound port (useful after binding port 0)."""

    host: str
    port: int
    _server: WSGIServer
    _serving_thread: threading.Thread

    def close(self) -> None:
        """Stop serving and release the socket; blocks until the serving thread has ended."""
        self._server.shutdown()
        self._server.server_close()
        self._serving_thread.join()


def serve_metrics(host: str, port: int, metrics: BrokerMetrics) -> MetricsServer:
    """Serve `metrics` on http://host:port/metrics from a daemon thread.

    Raises OSError when the address cannot be bound. The serving thread never touches Trio: the
    scrape reads counters (thread-safe) and the store's properties (plain attribute reads).
    """
    server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    return MetricsServer(host=host, port=server.server_port, _server=server, _serving_thread=thread)
