"""Tests of a sample application suite beyond the ones of docs/testing.md, which run with them
(the doc's conftest points `rmq_broker` at `rmq_broker_session`): a test that fails on purpose
and a broker that cannot start. `KEEP` runs alone, under `INI`'s settings."""

from __future__ import annotations

SHARED = """
import pytest

from rmq_client import BrokerStartError, Message


def test_fails_on_purpose(rmq_producer):
    rmq_producer.send(Message("ShownInTheReport", b"x"))
    assert 1 == 2


def test_a_broker_that_cannot_start_says_why(rmq_broker_factory):
    with pytest.raises(BrokerStartError, match="unknown configuration") as failure:
        rmq_broker_factory(config={"no_such_key": 1})
    assert "exited with code 2" in str(failure.value)
"""

#: ini keys: brokers refuse topics they do not know, and flush synchronously
INI = """
[pytest]
timeout = 120
rmq_broker_config =
    auto_create_topic_enable = false
rmq_flush_disk_type = SYNC_FLUSH
"""

KEEP = """
import pathlib

import pytest

from rmq_client import Message, SendError


def test_ini_settings_reach_the_broker(rmq_broker, rmq_producer):
    with pytest.raises(SendError, match="not exist"):
        rmq_producer.send(Message("NeverCreated", b"x"))
    (startup,) = [e for e in rmq_broker.events() if e.get("event") == "startup"]
    assert startup["flush_disk_type"] == "SYNC_FLUSH"
    pathlib.Path("kept_store.txt").write_text(str(rmq_broker.store_dir))
"""
