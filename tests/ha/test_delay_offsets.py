"""GET_ALL_DELAY_OFFSET's body: 4.9's fastjson form with unquoted level keys both ways, and
every malformed body refused with ValueError."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.ha.slave_sync import decode_delay_offsets, encode_delay_offsets


def test_4_9_form() -> None:
    assert encode_delay_offsets({2: 0, 1: 5}) == b'{"offsetTable":{1:5,2:0}}'
    assert decode_delay_offsets(b'{"offsetTable":{1:5,2:0}}') == {1: 5, 2: 0}
    assert decode_delay_offsets(b'{"offsetTable":{"3":7}}') == {3: 7}  # standard JSON too


@given(st.dictionaries(st.integers(1, 18), st.integers(0, 1 << 62)))
def test_round_trip(offsets: dict[int, int]) -> None:
    assert decode_delay_offsets(encode_delay_offsets(offsets)) == offsets


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"[]",
        b'{"offsetTable":[]}',
        b'{"offsetTable":{"x":1}}',
        b'{"offsetTable":{1:-1}}',
        b'{"offsetTable":{0:1}}',
        b'{"offsetTable":{1:"5"}}',
        b'{"offsetTable":{1:true}}',
        b"{",
    ],
)
def test_malformed_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(ValueError):
        decode_delay_offsets(body)
