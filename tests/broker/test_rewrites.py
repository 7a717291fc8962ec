"""The rewrites have one home (`broker.rewrites`) and one delay-level table (the store's
`message_delay_level`): a broker configured with three levels clamps a level of 99 to 3 alike on
a send and on a send-back, and its schedule waits the configured delay; the retry limit is one
rule; a bad level string is refused at startup, naming its key."""

from __future__ import annotations

import pathlib

import pytest
import trio

from broker.config import BrokerConfig, ConfigError, build_config
from broker.rewrites import past_retry_limit
from protocol.codes import ResponseCode
from protocol.properties import decode_properties
from rmq_client.producer import Message, SendError
from rmq_client.pull_consumer import open_pull_consumer
from store.config import DEFAULT_MESSAGE_DELAY_LEVEL
from tests.broker.test_send import records
from tests.broker.test_send_back import GROUP, send_back, send_one
from tests.conftest import RunningBroker, make_config

#: three levels, the first longer than RocketMQ's default first level (1 s)
LEVELS = "2s 3s 4s"


@pytest.fixture
def broker_config(tmp_path: pathlib.Path) -> BrokerConfig:
    return make_config(tmp_path / "store", flush_disk_type="SYNC_FLUSH", message_delay_level=LEVELS)


async def test_a_delay_level_is_clamped_alike_by_a_send_and_by_a_send_back(
    broker: RunningBroker,
) -> None:
    await send_one(broker.port, Message("Work", b"late", delay_level=99, queue_id=1))
    offset = await send_one(broker.port, Message("Work", b"again", queue_id=0))
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe("Work")
        answer = await send_back(consumer, offset, delay_level=99)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    # The retry is stored without waiting for the flush; a send that waits flushes it too.
    await send_one(broker.port, Message("Work", b"flush", queue_id=0))
    sent, sent_back = [r for r in records(broker.config) if r.topic == "SCHEDULE_TOPIC_XXXX"]
    for parked in (sent, sent_back):
        assert parked.queue_id == 2  # level 3, the highest configured, not RocketMQ's 18th
        assert decode_properties(parked.properties)["DELAY"] == "3"
    sent_props, back_props = (decode_properties(r.properties) for r in (sent, sent_back))
    assert (sent_props["REAL_TOPIC"], sent_props["REAL_QID"]) == ("Work", "1")
    assert back_props["REAL_TOPIC"] == f"%RETRY%{GROUP}"


async def test_the_schedule_waits_the_configured_delay(broker: RunningBroker) -> None:
    await send_one(broker.port, Message("Later", b"in two seconds", delay_level=1, queue_id=0))
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe("Later")
        with trio.fail_after(15):
            while True:
                try:
                    result = await consumer.pull("Later", 0, 0, expression="*", suspend_ms=3000)
                except SendError:  # the topic is created by the delivery
                    await trio.sleep(0.2)
                    continue
                if result.found:
                    break
    [delivered] = result.records
    assert delivered.body == b"in two seconds"
    assert "DELAY" not in decode_properties(delivered.properties)
    # The record timestamps say when: level 1 is 2 s here (1 s in RocketMQ's default table).
    assert delivered.store_timestamp - delivered.born_timestamp >= 2000


@pytest.mark.parametrize(
    ("reconsume_times", "group_max", "version", "client_max", "dead"),
    [
        (15, 16, 121, None, False),
        (16, 16, 121, None, True),
        (3, 16, 121, 3, True),  # a 3.4.9 client's own limit wins
        (3, 16, 120, 3, False),  # an older client's is ignored
        (0, 0, 121, None, True),
    ],
)
def test_the_retry_limit_is_the_groups_or_a_new_clients(
    reconsume_times: int, group_max: int, version: int, client_max: int | None, dead: bool
) -> None:
    assert past_retry_limit(reconsume_times, group_max, version, client_max) is dead


def test_the_default_levels_are_rocketmq_4_9s(tmp_path: pathlib.Path) -> None:
    config = make_config(tmp_path)
    assert config.store.message_delay_level == DEFAULT_MESSAGE_DELAY_LEVEL
    levels = config.store.delay_levels_ms()
    assert len(levels) == 18
    assert (levels[0], levels[4], levels[-1]) == (1000, 60_000, 7_200_000)
    assert make_config(tmp_path, message_delay_level="1s  5m 2h 1d").store.delay_levels_ms() == (
        1000,
        300_000,
        7_200_000,
        86_400_000,
    )


@pytest.mark.parametrize("text", ["", "   ", "1s 5", "1s 5x", "0s", "1.5s", "-1s", "s", "1S"])
def test_a_bad_level_string_is_refused_naming_its_key(text: str, tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError) as info:
        build_config({"store_path_root_dir": str(tmp_path), "message_delay_level": text})
    assert info.value.key == "message_delay_level"
