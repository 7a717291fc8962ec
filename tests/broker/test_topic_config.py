"""The topic and subscription-group tables: auto-creation rules and atomic JSON persistence."""

from __future__ import annotations

import json
import pathlib

import pytest

from broker.subscription_group import SubscriptionGroupManager
from broker.topic_config import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    TopicConfig,
    TopicConfigManager,
)
from protocol.codes import ResponseCode
from protocol.errors import HeaderFieldError


def test_template_topic_exists_only_with_auto_create() -> None:
    on = TopicConfigManager(None, auto_create_topic_enable=True, default_topic_queue_nums=8)
    template = on.find(AUTO_CREATE_TOPIC_KEY_TOPIC)
    assert template == TopicConfig("TBW102", 8, 8, PERM_READ | PERM_WRITE | PERM_INHERIT)
    off = TopicConfigManager(None, auto_create_topic_enable=False)
    assert off.find(AUTO_CREATE_TOPIC_KEY_TOPIC) is None
    assert off.create_in_send("T", "TBW102", 4, 0) is None


def test_built_in_topics_have_rocketmq_queue_counts() -> None:
    topics = TopicConfigManager(None, cluster_name="C1", broker_name="b1")
    everything = PERM_READ | PERM_WRITE | PERM_INHERIT
    assert topics.find("C1") == TopicConfig("C1", 16, 16, everything)
    assert topics.find("b1") == TopicConfig("b1", 1, 1, everything)
    assert topics.find("C1_REPLY_TOPIC") == TopicConfig("C1_REPLY_TOPIC", 1, 1)
    assert topics.find("BenchmarkTest") == TopicConfig("BenchmarkTest", 1024, 1024)


def test_auto_created_topic_takes_the_smaller_queue_count_and_drops_inherit() -> None:
    topics = TopicConfigManager(None, default_topic_queue_nums=8)
    created = topics.create_in_send("Orders", "TBW102", 4, 0)
    assert created == TopicConfig("Orders", 4, 4, PERM_READ | PERM_WRITE)
    assert topics.create_in_send("Big", "TBW102", 64, 0) == TopicConfig(
        "Big", 8, 8, PERM_READ | PERM_WRITE
    )
    # A template without INHERIT cannot spawn topics.
    assert topics.create_in_send("Child", "Orders", 4, 0) is None


async def test_persisted_table_has_rocketmq_shape_and_reloads(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "config" / "topics.json"
    topics = TopicConfigManager(path)
    topics.create_in_send("Orders", "TBW102", 4, 0)
    await topics.persist()
    data = json.loads(path.read_text())
    assert data["dataVersion"]["counter"] >= 1
    assert data["topicConfigTable"]["Orders"] == {
        "order": False,
        "perm": 6,
        "readQueueNums": 4,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "Orders",
        "topicSysFlag": 0,
        "writeQueueNums": 4,
    }
    assert list(path.parent.iterdir()) == [path]  # no temporary file left behind
    reloaded = TopicConfigManager(path)
    assert reloaded.find("Orders") == topics.find("Orders")


def test_topic_config_text_matches_java_to_string() -> None:
    text = str(TopicConfig("T", 4, 4, PERM_READ | PERM_WRITE))
    assert text == (
        "TopicConfig [topicName=T, readQueueNums=4, writeQueueNums=4, perm=RW-, "
        "topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false]"
    )


async def test_subscription_groups_are_created_once_and_persisted(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "config" / "subscriptionGroup.json"
    groups = SubscriptionGroupManager(path)
    assert groups.ensure("g1") is True
    assert groups.ensure("g1") is False
    await groups.persist()
    reloaded = SubscriptionGroupManager(path)
    found = reloaded.find("g1")
    assert found is not None and found.retry_max_times == 16
    assert SubscriptionGroupManager(None, auto_create=False).ensure("g2") is False


@pytest.mark.parametrize(
    "topic", ["%DLQ%1.5", "%DLQ%-0.0", "%DLQ%\u200b", "%RETRY%a\x01b", "%RETRY%a\x02b", "x" * 128]
)
def test_retry_and_dlq_topics_are_held_to_the_send_topic_rule(topic: str) -> None:
    topics = TopicConfigManager(None)
    with pytest.raises(HeaderFieldError) as refused:
        topics.create_in_send_back(topic, 1, PERM_READ | PERM_WRITE, 0)
    assert refused.value.response_code == ResponseCode.SYSTEM_ERROR
    assert str(refused.value).startswith("The specified topic ")
    assert topics.find(topic) is None


def test_a_topic_table_at_its_limit_creates_nothing_more() -> None:
    topics = TopicConfigManager(
        None, auto_create_topic_max_num=len(TopicConfigManager(None).topics()) + 1
    )
    assert topics.create_in_send("One", "TBW102", 4, 0) is not None
    with pytest.raises(HeaderFieldError) as refused:
        topics.create_in_send("Two", "TBW102", 4, 0)
    assert refused.value.response_code == ResponseCode.TOPIC_NOT_EXIST
    with pytest.raises(HeaderFieldError) as refused:
        topics.create_in_send_back("%RETRY%two", 1, PERM_READ | PERM_WRITE, 0)
    assert refused.value.response_code == ResponseCode.TOPIC_NOT_EXIST
    assert topics.create_in_send("One", "TBW102", 4, 0) is not None  # found, not created


def test_a_group_table_at_its_limit_creates_nothing_more() -> None:
    groups = SubscriptionGroupManager(None, max_num=1)
    assert groups.ensure("g1") is True
    with pytest.raises(HeaderFieldError) as refused:
        groups.ensure("g2")
    assert refused.value.response_code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    assert groups.ensure("g1") is False and groups.find("g2") is None
