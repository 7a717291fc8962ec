"""BrokerMetrics over a real /metrics endpoint on 127.0.0.1, port 0, scraped as Prometheus does."""

from __future__ import annotations

import sys
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.metrics import (
    DELETE_REASONS,
    BrokerMetrics,
    MetricsServer,
    StoreStatsProvider,
    serve_metrics,
)
from store import status
from store.cleanup import DeleteReason
from store.status import RunningFlags

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass
class FakeStoreStats:
    """Stands in for DefaultMessageStore: plain attributes the scrape reads."""

    max_offset: int = 0
    flushed_where: int = 0
    segment_count: int = 1
    writer_queue_depth: int = 0
    running_flags: RunningFlags = field(default_factory=RunningFlags)
    min_offset: int = 0
    disk_ratio: float = 0.0
    segments_deleted: dict[str, int] = field(default_factory=dict)


@pytest.fixture
def metrics() -> BrokerMetrics:
    return BrokerMetrics()


@pytest.fixture
def server(metrics: BrokerMetrics) -> Iterator[MetricsServer]:
    running = serve_metrics("127.0.0.1", 0, metrics)
    yield running
    running.close()


def scrape(server: MetricsServer) -> Samples:
    url = f"http://{server.host}:{server.port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_serve_metrics_binds_an_ephemeral_port(server: MetricsServer) -> None:
    assert server.port > 0
    assert scrape(server)[("rmq_broker_open_connections", ())] == 0


def test_puts_are_counted_by_topic_and_status(
    metrics: BrokerMetrics, server: MetricsServer
) -> None:
    metrics.record_put("orders", "PUT_OK", body_bytes=100, latency_s=0.002)
    metrics.record_put("orders", "PUT_OK", body_bytes=50, latency_s=0.004, messages=3)
    metrics.record_put("orders", "FLUSH_DISK_TIMEOUT", body_bytes=7, latency_s=5.5)
    metrics.record_put("audit", "PUT_OK", body_bytes=1, latency_s=0.0001)

    samples = scrape(server)

    ok = (("status", "PUT_OK"), ("topic", "orders"))
    timeout = (("status", "FLUSH_DISK_TIMEOUT"), ("topic", "orders"))
    assert samples[("rmq_broker_put_messages_total", ok)] == 4
    assert samples[("rmq_broker_put_bytes_total", ok)] == 150
    assert samples[("rmq_broker_put_messages_total", timeout)] == 1
    assert samples[("rmq_broker_put_bytes_total", timeout)] == 7
    audit = (("status", "PUT_OK"), ("topic", "audit"))
    assert samples[("rmq_broker_put_messages_total", audit)] == 1
    assert samples[("rmq_broker_put_latency_seconds_count", ())] == 4
    assert samples[("rmq_broker_put_latency_seconds_sum", ())] == pytest.approx(5.5061)
    assert samples[("rmq_broker_put_latency_seconds_bucket", (("le", "0.0025"),))] == 2
    assert samples[("rmq_broker_put_latency_seconds_bucket", (("le", "5.0"),))] == 3
    assert samples[("rmq_broker_put_latency_seconds_bucket", (("le", "+Inf"),))] == 4


def test_flush_latency_busy_reasons_and_connections(
    metrics: BrokerMetrics, server: MetricsServer
) -> None:
    metrics.record_flush(0.0003)
    metrics.record_flush(0.02)
    for _ in range(3):
        metrics.record_system_busy("queue_full")
    metrics.record_system_busy("writer_stuck")
    for _ in range(5):
        metrics.connection_opened()
    metrics.connection_closed()

    samples = scrape(server)

    assert samples[("rmq_broker_flush_latency_seconds_count", ())] == 2
    assert samples[("rmq_broker_flush_latency_seconds_bucket", (("le", "0.0005"),))] == 1
    assert samples[("rmq_broker_system_busy_total", (("reason", "queue_full"),))] == 3
    assert samples[("rmq_broker_system_busy_total", (("reason", "writer_stuck"),))] == 1
    assert samples[("rmq_broker_open_connections", ())] == 4


def test_scrapes_while_puts_are_counted_see_whole_growing_figures(
    metrics: BrokerMetrics, server: MetricsServer
) -> None:
    # The put figures are plain numbers that the scrape thread copies while the event loop's
    # thread adds topics: a scrape must never break on it, and nothing may go backwards.
    collected: list[float] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def scraper() -> None:
        try:
            while not done.is_set():
                families = list(metrics.registry.collect())
                collected.append(
                    sum(
                        sample.value
                        for family in families
                        for sample in family.samples
                        if sample.name == "rmq_broker_put_messages_total"
                    )
                )
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=scraper)
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the GIL over as often as possible
    thread.start()
    try:
        for n in range(20_000):
            metrics.record_put(f"topic-{n}", "PUT_OK", body_bytes=10, latency_s=0.001)
    finally:
        done.set()
        thread.join()
        sys.setswitchinterval(previous)
    assert not errors, errors
    assert len(collected) > 1 and collected == sorted(collected)
    assert scrape(server)[("rmq_broker_put_latency_seconds_count", ())] == 20_000


def test_store_gauges_are_read_at_scrape_time(
    metrics: BrokerMetrics, server: MetricsServer
) -> None:
    store = FakeStoreStats(max_offset=4096, flushed_where=1024, segment_count=2)
    provider: StoreStatsProvider = store
    metrics.attach_store(provider)

    first = scrape(server)
    store.max_offset, store.flushed_where, store.writer_queue_depth = 8192, 8192, 17
    store.segment_count = 3
    store.running_flags.set(status.NOT_WRITEABLE)
    store.running_flags.set(status.DISK_FULL)
    second = scrape(server)

    assert first[("rmq_broker_store_written_offset_bytes", ())] == 4096
    assert first[("rmq_broker_store_flushed_offset_bytes", ())] == 1024
    assert first[("rmq_broker_store_segments", ())] == 2
    assert first[("rmq_broker_store_writeable", ())] == 1
    assert first[("rmq_broker_store_flag", (("flag", "disk_full"),))] == 0
    assert second[("rmq_broker_store_written_offset_bytes", ())] == 8192
    assert second[("rmq_broker_store_flushed_offset_bytes", ())] == 8192
    assert second[("rmq_broker_store_writer_queue_depth", ())] == 17
    assert second[("rmq_broker_store_segments", ())] == 3
    assert second[("rmq_broker_store_writeable", ())] == 0
    assert second[("rmq_broker_store_flag", (("flag", "disk_full"),))] == 1
    assert second[("rmq_broker_store_flag", (("flag", "not_writeable"),))] == 1
    assert second[("rmq_broker_store_flag", (("flag", "not_readable"),))] == 0
    assert second[("rmq_broker_store_flag", (("flag", "create_mapped_file_failed"),))] == 0


def test_retention_figures_are_read_at_scrape_time(
    metrics: BrokerMetrics, server: MetricsServer
) -> None:
    store = FakeStoreStats(min_offset=0, disk_ratio=0.5)
    metrics.attach_store(store)
    first = scrape(server)
    store.min_offset, store.disk_ratio = 1 << 30, 0.87
    store.segments_deleted = {"expired": 3, "forced": 1}
    second = scrape(server)

    assert first[("rmq_broker_store_min_offset_bytes", ())] == 0
    assert first[("rmq_broker_store_disk_used_ratio", ())] == 0.5
    for reason in ("expired", "forced", "manual"):
        assert first[("rmq_broker_store_segments_deleted_total", (("reason", reason),))] == 0
    assert second[("rmq_broker_store_min_offset_bytes", ())] == 1 << 30
    assert second[("rmq_broker_store_disk_used_ratio", ())] == 0.87
    assert second[("rmq_broker_store_segments_deleted_total", (("reason", "expired"),))] == 3
    assert second[("rmq_broker_store_segments_deleted_total", (("reason", "forced"),))] == 1
    assert second[("rmq_broker_store_segments_deleted_total", (("reason", "manual"),))] == 0


def test_every_delete_reason_of_the_store_is_exported() -> None:
    assert set(DELETE_REASONS) == {reason.value for reason in DeleteReason}


def test_a_failed_segment_creation_blocks_writes(
    metrics: BrokerMetrics, server: MetricsServer
) -> None:
    store = FakeStoreStats()
    store.running_flags.set(status.CREATE_MAPPED_FILE_FAILED)
    metrics.attach_store(store)
    samples = scrape(server)
    assert samples[("rmq_broker_store_flag", (("flag", "create_mapped_file_failed"),))] == 1
    assert samples[("rmq_broker_store_writeable", ())] == 0


def test_only_a_read_flag_keeps_the_store_writeable(
    metrics: BrokerMetrics, server: MetricsServer
) -> None:
    store = FakeStoreStats()
    store.running_flags.set(status.NOT_READABLE)
    metrics.attach_store(store)
    samples = scrape(server)
    assert samples[("rmq_broker_store_flag", (("flag", "not_readable"),))] == 1
    assert samples[("rmq_broker_store_writeable", ())] == 1


def test_detached_store_is_no_longer_read(metrics: BrokerMetrics, server: MetricsServer) -> None:
    metrics.attach_store(FakeStoreStats(max_offset=1))
    metrics.attach_store(FakeStoreStats(max_offset=2))
    assert scrape(server)[("rmq_broker_store_written_offset_bytes", ())] == 2
    metrics.detach_store()
    assert ("rmq_broker_store_written_offset_bytes", ()) not in scrape(server)


def test_two_brokers_do_not_share_counters(metrics: BrokerMetrics, server: MetricsServer) -> None:
    other = BrokerMetrics()
    other.record_system_busy("queue_full")
    other_server = serve_metrics("127.0.0.1", 0, other)
    try:
        assert other_server.port != server.port
        assert scrape(other_server)[("rmq_broker_system_busy_total", (("reason", "queue_full"),))]
        busy = [key for key in scrape(server) if key[0] == "rmq_broker_system_busy_total"]
        assert busy == []
    finally:
        other_server.close()


def test_bare_flag_bits_are_accepted(metrics: BrokerMetrics, server: MetricsServer) -> None:
    @dataclass
    class BitsOnly:
        max_offset: int = 0
        flushed_where: int = 0
        segment_count: int = 0
        writer_queue_depth: int = 0
        running_flags: int = status.DISK_FULL
        min_offset: int = 0
        disk_ratio: float = 0.0
        segments_deleted: dict[str, int] = field(default_factory=dict)

    metrics.attach_store(BitsOnly())
    samples = scrape(server)
    assert samples[("rmq_broker_store_flag", (("flag", "disk_full"),))] == 1
    assert samples[("rmq_broker_store_writeable", ())] == 0
