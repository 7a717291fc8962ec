"""The admin bodies in fastjson's shapes: texts written by hand from 4.9's Java classes the way
fastjson writes them (`tests/golden/fastjson_*.txt`: fields in alphabetical order, a
`MessageQueue` map key written as an object) decode to their values, and ours encode back to
the same structure; the reader refuses what is not JSON in either form, with a reason."""

from __future__ import annotations

import pathlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.admin_topic import (
    DataVersion,
    KVTable,
    MessageQueue,
    TopicConfigData,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicOffset,
    TopicStatsTable,
    parse_properties,
    properties_text,
)
from protocol.errors import HeaderFieldError
from protocol.fastjson import FastjsonError, ObjectKey, dumps, loads

GOLDEN = pathlib.Path(__file__).parent.parent / "golden"


def golden(name: str) -> bytes:
    return (GOLDEN / f"fastjson_{name}.txt").read_bytes().strip()


def test_topic_stats_with_message_queue_keys() -> None:
    text = golden("topic_stats")
    table = TopicStatsTable.from_json(text).offset_table
    assert table == {
        MessageQueue("Orders", "broker-a", 0): TopicOffset(2, 12, 1700000000123),
        MessageQueue("Orders", "broker-a", 1): TopicOffset(0, 0, 0),
    }
    ours = TopicStatsTable(table).to_json()
    assert loads(ours) == loads(text)
    # one entry has one order: then the text is byte for byte fastjson's
    single = {MessageQueue("Orders", "broker-a", 0): TopicOffset(2, 12, 1700000000123)}
    assert TopicStatsTable(single).to_json() == (
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"Orders"}:'
        b'{"lastUpdateTimestamp":1700000000123,"maxOffset":12,"minOffset":2}}}'
    )


def test_topic_stats_from_a_standard_json_writer() -> None:
    """A writer that stringifies the key (standard JSON) is read too."""
    text = (
        b'{"offsetTable":{"{\\"brokerName\\":\\"b\\",\\"queueId\\":3,\\"topic\\":\\"T\\"}":'
        b'{"lastUpdateTimestamp":5,"maxOffset":7,"minOffset":1}}}'
    )
    assert TopicStatsTable.from_json(text).offset_table == {
        MessageQueue("T", "b", 3): TopicOffset(1, 7, 5)
    }


def test_topic_config_wrapper() -> None:
    text = golden("topic_config")
    wrapper = TopicConfigSerializeWrapper.from_json(text)
    assert wrapper.data_version == DataVersion(3, 1700000000456)
    assert wrapper.topic_config_table["Orders"] == TopicConfigData("Orders", 8, 4, 6, order=True)
    assert wrapper.topic_config_table["TBW102"] == TopicConfigData("TBW102", 8, 8, 7)
    assert wrapper.to_json() == text


def test_topic_list_and_kv_table() -> None:
    assert TopicList(frozenset({"B", "A"})).to_json() == b'{"topicList":["A","B"]}'
    assert TopicList.from_json(b'{"brokerAddr":"1.2.3.4:10911","topicList":["A"]}') == TopicList(
        frozenset({"A"}), "1.2.3.4:10911"
    )
    table = {"brokerVersion": "407", "putTps": "1.5 2.0 "}
    text = b'{"table":{"brokerVersion":"407","putTps":"1.5 2.0 "}}'
    assert KVTable(table).to_json() == text
    assert KVTable.from_json(text).table == table


def test_number_keys_are_written_bare_and_read_back() -> None:
    text = dumps({"brokerAddrs": {1: "b", 0: "a"}})
    assert text == '{"brokerAddrs":{0:"a",1:"b"}}'
    assert loads(text) == {"brokerAddrs": {0: "a", 1: "b"}}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "expected a value"),
        ("{", "expected"),
        ('{"a":1,}', "expected a key at character 7"),
        ("[1,]", "expected a value at character 3"),
        ("{1.5:2}", "a number key must be an integer"),
        ('{{"a":[1]}:2}', "an object key holds only plain values"),
        ("{{1:2}:3}", "an object key's own keys must be strings"),
        ('{"a":1} tail', "not JSON at character 8"),
        ('{"a":1} 2', "extra text after the value at character 8"),
        ("[" * 100 + "]" * 100, "nested deeper than 64"),
        ('"\\x"', "bad string"),
    ],
)
def test_what_is_not_json_is_refused_with_a_reason(text: str, problem: str) -> None:
    with pytest.raises(FastjsonError, match=problem):
        loads(text)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"\xff", "not UTF-8"),
        (b"[]", "is not a JSON object"),
        (b'{"offsetTable":{"x":{}}}', "not a MessageQueue object"),
        (b'{"offsetTable":{{"topic":"T","brokerName":"b"}:{}}}', "queueId is missing"),
        (b'{"offsetTable":{{"topic":"T","brokerName":"b","queueId":"q"}:{}}}', "queueId"),
        (
            b'{"offsetTable":{{"topic":"T","brokerName":"b","queueId":0}:{"maxOffset":"z"}}}',
            "offsetTable.b/T/0.maxOffset",
        ),
    ],
)
def test_bad_stats_bodies_name_the_problem(body: bytes, problem: str) -> None:
    with pytest.raises(HeaderFieldError, match=problem):
        TopicStatsTable.from_json(body)


def test_object_keys_are_hashable_values() -> None:
    key = ObjectKey.of({"topic": "T", "queueId": 1})
    assert key == ObjectKey.of({"queueId": 1, "topic": "T"})
    assert key.fields == {"queueId": 1, "topic": "T"}


def test_properties_text_round_trip_and_java_forms() -> None:
    values = {"brokerPermission": "4", "regionId": "East"}
    assert properties_text(values) == b"brokerPermission=4\nregionId=East\n"
    assert parse_properties(properties_text(values)) == values
    java = b"# comment\n! other\n\n  traceOn : false\nregionId=a\\=b\\tc\nempty=\n"
    assert parse_properties(java) == {"traceOn": "false", "regionId": "a=b\tc", "empty": ""}
    with pytest.raises(HeaderFieldError, match="line 1 has no key"):
        parse_properties(b"=4")
    with pytest.raises(HeaderFieldError, match="not UTF-8"):
        parse_properties(b"a=\xff")


_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8)
_keys = (
    st.text(max_size=8)
    | st.integers(-(2**31), 2**31)
    | st.dictionaries(st.text(max_size=4), st.integers() | st.text(max_size=4), max_size=3).map(
        ObjectKey.of
    )
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=20,
)


def _without_null_fields(value: object) -> object:
    if isinstance(value, dict):
        return {k: _without_null_fields(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_null_fields(v) for v in value]
    return value


@given(_values)
def test_what_dumps_writes_loads_reads_back(value: object) -> None:
    assert loads(dumps(value)) == _without_null_fields(value)
