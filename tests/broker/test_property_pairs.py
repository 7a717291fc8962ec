"""Property strings the broker builds hold only whole `name \\x01 value` pairs (issue #26,
finding 8), against a real broker on loopback.

A batch message's own properties with a segment that is no pair (a stray name, an empty one)
are stored re-encoded, so every stored segment has its separator; a value holding the
separator \\x01, which Java and C++ clients would split differently, is refused at the door
in a single send and in a batch; a cluster name with a control character, which every record
carries as its CLUSTER property, stops the configuration.
"""

from __future__ import annotations

import pathlib

import pytest

from broker.config import BrokerConfig, ConfigError, build_config
from protocol.batch import BatchEntry, encode_batch_body
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.properties import decode_properties
from rmq_client.producer import Producer
from store.reader import CommitLogReader
from tests.conftest import RunningBroker, make_config


@pytest.fixture
def broker_config(tmp_path: pathlib.Path) -> BrokerConfig:
    """SYNC_FLUSH: an acknowledged record is durable, so a reader of the files sees it."""
    return make_config(tmp_path / "store", flush_disk_type="SYNC_FLUSH")


def send_frame(properties: str, *, batch_body: bytes | None = None) -> RemotingCommand:
    fields = {
        "producerGroup": "pg",
        "topic": "Pairs",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": "1700000000000",
        "flag": "0",
        "properties": properties,
    }
    if batch_body is not None:
        fields["batch"] = "true"
    body = batch_body if batch_body is not None else b"body"
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, fields, body)


def stored_properties(broker: RunningBroker) -> list[str]:
    with CommitLogReader(broker.config.store.store_path_root_dir) as reader:
        return [r.properties for r in reader.iter_records(reader.min_offset)]


def whole_pairs(properties: str) -> bool:
    """Every segment is `name \\x01 value` with one separator and nothing empty."""
    return all(
        segment.count("\x01") == 1
        and not segment.startswith("\x01")
        and not segment.endswith("\x01")
        for segment in properties.split("\x02")
    )


async def test_batch_segments_that_are_no_pair_are_not_stored(
    broker: RunningBroker, producer: Producer
) -> None:
    entries = [
        BatchEntry(0, b"a", "stray\x02TAGS\x01t0\x02\x02KEYS\x01k0\x02"),
        BatchEntry(0, b"b", "\x01nameless\x02TAGS\x01t1"),
    ]
    body = encode_batch_body(entries)
    answer = await producer.request(send_frame("WAIT\x01true\x02", batch_body=body))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    stored = stored_properties(broker)
    assert len(stored) == 2 and all(whole_pairs(p) for p in stored), stored
    assert decode_properties(stored[0]) == {
        "TAGS": "t0",
        "KEYS": "k0",
        "WAIT": "true",
        "CLUSTER": "DefaultCluster",
    }


@pytest.mark.parametrize("batch", [False, True])
async def test_a_value_holding_the_pair_separator_is_refused(
    broker: RunningBroker, producer: Producer, batch: bool
) -> None:
    own = "TAGS\x01t\x02color\x01red\x01blue"
    if batch:
        request = send_frame("", batch_body=encode_batch_body([BatchEntry(0, b"a", own)]))
    else:
        request = send_frame(own)
    answer = await producer.request(request)
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL
    assert "the value of message property color holds the name-value separator" in str(
        answer.remark
    )
    assert stored_properties(broker) == []
    fine = await producer.request(send_frame("TAGS\x01t"))  # the connection is served on
    assert fine.code == ResponseCode.SUCCESS and len(stored_properties(broker)) == 1


@pytest.mark.parametrize("name", ["a\x01b", "a\x02b", "tab\there"])
def test_a_cluster_name_with_a_control_character_is_refused(name: str) -> None:
    with pytest.raises(ConfigError) as refused:
        build_config({"broker_cluster_name": name})
    assert refused.value.key == "broker_cluster_name"
