"""Stopping the store while it recovers: the scan stops early, nothing is changed, and the next
open recovers everything."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
import structlog
import trio

from store import decode, recovery
from store.checkpoint import TOPIC_QUEUE_TABLE_FILE
from store.config import MessageStoreConfig
from store.message_store import DefaultMessageStore
from tests.store.conftest import make_msg

COUNT = 300


async def _fill(config: MessageStoreConfig) -> None:
    async with DefaultMessageStore.open(config) as store:
        for i in range(COUNT):
            await store.put_message(make_msg(b"m%d" % i, wait_store_msg_ok=False))


async def test_a_cancel_during_recovery_stops_the_scan(
    config: MessageStoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _fill(config)
    os.remove(os.path.join(config.store_path_root_dir, TOPIC_QUEUE_TABLE_FILE))  # scan all
    checked = 0
    real_check = decode.check_message_and_return_size

    def slow_check(*args: Any) -> Any:
        nonlocal checked
        checked += 1
        time.sleep(0.002)  # about 0.6 s for the whole log
        return real_check(*args)

    monkeypatch.setattr(recovery, "check_message_and_return_size", slow_check)
    monkeypatch.setattr(recovery, "STOP_CHECK_RECORDS", 8)
    with structlog.testing.capture_logs() as events, trio.fail_after(10):
        with trio.move_on_after(0.1) as scope:
            async with DefaultMessageStore.open(config):
                pytest.fail("the store opened although its recovery was cancelled")
    assert scope.cancelled_caught
    assert "recovery_stopped" in [event["event"] for event in events]
    assert checked < COUNT // 2
    monkeypatch.setattr(recovery, "check_message_and_return_size", real_check)
    async with DefaultMessageStore.open(config) as store:  # the lock was released
        assert store.commit_log.topic_queue_table["T1-0"] == COUNT
