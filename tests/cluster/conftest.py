"""One module-scoped cluster: 2 name servers, brokers broker-a/b/c registered with both."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.cluster import BROKER_NAMES, Cluster, broker_names
from tests.integration.conftest import client_home

__all__ = ["client_home", "cluster"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        running.start_brokers()
        running.wait_route("TBW102", lambda route: broker_names(route) == set(BROKER_NAMES))
        yield running
    finally:
        codes = running.stop()
    assert set(codes.values()) <= {0}, codes
