"""Properties strings: upstream's parsing rules and round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.properties import MessageConst, decode_properties, encode_properties

names = st.text(min_size=1, max_size=20).filter(lambda s: "\x01" not in s and "\x02" not in s)
values = st.text(min_size=1, max_size=40).filter(lambda s: "\x02" not in s)


@given(st.dictionaries(names, values, max_size=10))
@settings(max_examples=150)
def test_round_trip(properties: dict[str, str]) -> None:
    text = encode_properties(properties)
    assert not text.endswith("\x02")
    assert decode_properties(text) == properties


@given(st.text(alphabet="ab\x01\x02", max_size=30))
@settings(max_examples=150)
def test_decode_never_raises_and_keeps_nonempty_pairs(text: str) -> None:
    result = decode_properties(text)
    assert all(name and value and "\x02" not in value for name, value in result.items())


def test_trailing_separator_is_tolerated() -> None:
    assert decode_properties("WAIT\x01true\x02") == {"WAIT": "true"}


def test_first_separator_splits_name_and_value() -> None:
    assert decode_properties("k\x01a\x01b") == {"k": "a\x01b"}


def test_short_and_empty_segments_are_skipped() -> None:
    # "a\x01" and "\x01b" are shorter than 3; "ab\x01" has an empty value; "\x01bc" no name
    text = "a\x01\x02\x01b\x02ab\x01\x02\x01bc\x02noseparator\x02kk\x01v"
    assert decode_properties(text) == {"kk": "v"}


def test_later_duplicates_win() -> None:
    assert decode_properties("TAGS\x01a\x02TAGS\x01b") == {"TAGS": "b"}


def test_none_or_empty() -> None:
    assert decode_properties(None) == {}
    assert decode_properties("") == {}


def test_encode_skips_none_and_keeps_order() -> None:
    text = encode_properties({"TAGS": "a", "KEYS": None, "WAIT": "false"})
    assert text == "TAGS\x01a\x02WAIT\x01false"


@pytest.mark.parametrize(("name", "value"), [("a\x01", "v"), ("a\x02", "v"), ("a", "v\x02")])
def test_encode_rejects_separators(name: str, value: str) -> None:
    with pytest.raises(ValueError, match="separator"):
        encode_properties({name: value})


def test_message_const_names() -> None:
    assert MessageConst.WAIT_STORE_MSG_OK == "WAIT"
    assert MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX == "UNIQ_KEY"
    assert MessageConst.TRACE_SWITCH == "TRACE_ON"
    assert MessageConst.REAL_QUEUE_ID == "REAL_QID"
    assert MessageConst.TRANSACTION_PREPARED == "TRAN_MSG"
    assert MessageConst.CLUSTER in MessageConst.SYSTEM_KEYS
    assert "color" not in MessageConst.SYSTEM_KEYS
    assert len(MessageConst.SYSTEM_KEYS) == 35


def test_encode_keeps_a_value_holding_the_name_value_separator() -> None:
    # only a name may not hold \x01: a value with one is written as it is
    text = encode_properties({"a": "v\x01w", "b": "c"})
    assert text == "a\x01v\x01w\x02b\x01c"
    assert encode_properties({}) == "" and encode_properties({"a": None}) == ""


@pytest.mark.parametrize(
    "properties",
    [
        {"a": "1", "b\x01": "2", "c": "3"},
        {"a": "1\x02", "b": "2"},
        {"a": "1", "b\x02c": "2"},
        {"a\x01": "1", "b": "2\x01"},
    ],
)
def test_encode_rejects_a_separator_among_sound_pairs(properties: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="separator"):
        encode_properties(properties)
