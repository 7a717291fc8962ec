"""The store's figures on the broker's /metrics page: the adapter from `DefaultMessageStore` to
`broker.metrics.StoreStatsProvider`, the timed flusher, and the HTTP port's lifetime (/metrics
and the dashboard, `broker.dashboard.http`) beside the store's.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

import structlog
import trio

from broker.config import BrokerConfig
from broker.dashboard.http import HttpEndpoint, serve_http
from broker.metrics import BrokerMetrics, MetricsServer
from broker.resources import bind_error
from store.flush import Flusher, thread_flusher
from store.mapped_file import MappedFile
from store.message_store import DefaultMessageStore

log = structlog.get_logger()


class _StoreStats:
    """The store's gauges as `broker.metrics.StoreStatsProvider` wants them."""

    def __init__(self, store: DefaultMessageStore) -> None:
        self._store = store

    @property
    def max_offset(self) -> int:
        return self._store.max_offset

    @property
    def flushed_where(self) -> int:
        return self._store.flushed_where

    @property
    def segment_count(self) -> int:
        return self._store.segment_count

    @property
    def writer_queue_depth(self) -> int:
        return self._store.writer_queue_depth

    @property
    def running_flags(self) -> int:
        return self._store.running_flags.flag_bits

    @property
    def min_offset(self) -> int:
        return self._store.min_offset

    @property
    def disk_ratio(self) -> float:
        return self._store.disk_ratio

    @property
    def segments_deleted(self) -> dict[str, int]:
        return self._store.segments_deleted


def timed_flusher(metrics: BrokerMetrics) -> Flusher:
    """The store's default flusher, its successful flushes timed into the flush histogram."""

    async def flush(mapped_file: MappedFile) -> None:
        started = time.perf_counter()
        await thread_flusher(mapped_file)
        metrics.record_flush(time.perf_counter() - started)

    return flush


@contextlib.asynccontextmanager
async def serving_metrics(
    config: BrokerConfig, store: DefaultMessageStore, metrics: BrokerMetrics
) -> AsyncIterator[HttpEndpoint | None]:
    """Serve the HTTP port (/metrics and the dashboard) while the store is open; yields its
    endpoint, to attach the broker to once built, or None when `metrics_listen` is off."""
    server: MetricsServer | None = None
    endpoint: HttpEndpoint | None = None
    if config.metrics_listen is not None:
        metrics.attach_store(_StoreStats(store))
        listen = config.metrics_listen
        endpoint = HttpEndpoint(metrics)
        try:
            server = await trio.to_thread.run_sync(serve_http, listen.host, listen.port, endpoint)
        except OSError as exc:
            raise bind_error("metrics_listen", listen, exc) from None
        endpoint.port = server.port
        log.info("metrics_listening", host=listen.host, port=server.port)
    try:
        yield endpoint
    finally:
        if endpoint is not None:
            endpoint.detach()
        if server is not None:
            await trio.to_thread.run_sync(server.close)
        metrics.detach_store()
