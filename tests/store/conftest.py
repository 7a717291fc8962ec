"""Fixtures for the store tests: real files in a temporary directory, 4 KiB segments."""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from store.config import MessageStoreConfig
from store.mapped_file import create_segment_file
from store.message import MessageExtBrokerInner

SEGMENT = 4096


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    """Virtual time that jumps only after 20 ms of real idleness: a worker thread (segment
    creation, checkpoint write) finishes before the clock moves, so timings stay exact."""
    return trio.testing.MockClock(autojump_threshold=0.02)


@pytest.fixture
def config(tmp_path: Path) -> MessageStoreConfig:
    base = MessageStoreConfig(store_path_root_dir=str(tmp_path / "store"))
    return dataclasses.replace(base, mapped_file_size_commit_log=SEGMENT, checkpoint_interval_ms=50)


def make_msg(
    body: bytes = b"hello",
    topic: str = "T1",
    queue_id: int = 0,
    properties: str = "TAGS\x01TagA\x02CLUSTER\x01DefaultCluster",
    **fields: object,
) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(
        topic=topic,
        queue_id=queue_id,
        body=body,
        properties_string=properties,
        **fields,  # type: ignore[arg-type]
    )


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll `predicate` every 10 ms; trio.TooSlowError after `timeout_s`."""
    with trio.fail_after(timeout_s):
        for _ in itertools.count():
            if predicate():
                return
            await trio.sleep(0.01)


def patch_file(path: str, position: int, data: bytes) -> None:
    with open(path, "r+b") as handle:
        handle.seek(position)
        handle.write(data)


def touch(path: str) -> None:
    with open(path, "wb"):
        pass


def read_file(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def body_for_record_size(size: int, topic: str = "T1", properties: str = "") -> bytes:
    """A body that makes an IPv4 record exactly `size` bytes long."""
    return b"b" * (size - 91 - len(topic.encode()) - len(properties.encode()))


#: a generous bound on a wait for something the test holds up
DEADLINE_S = 20.0


class StuckCreate:
    """Segment creation that does not return until the test releases it."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()

    def __call__(self, path: str, size: int) -> None:
        self.entered.set()
        self.released.wait(DEADLINE_S)
        create_segment_file(path, size)
