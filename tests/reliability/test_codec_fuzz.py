"""Hypothesis on the codecs where tests/protocol checks only round trips: structured JSON headers
of any shape, send headers with any field values, batch bodies, and mutations of valid frames.

The rule each test enforces: input from a peer decodes, or raises the protocol's own error for it
(`RemotingProtocolError` for a frame, `HeaderFieldError` for a send header, `BatchBodyError` for a
batch body); never another exception, which the broker would turn into a logged SYSTEM_ERROR.
"""

from __future__ import annotations

import contextlib
import json
import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.batch import BatchEntry, decode_batch_body, encode_batch_body
from protocol.codes import RequestCode, SerializeType
from protocol.command import RemotingCommand
from protocol.errors import BatchBodyError, HeaderFieldError, RemotingProtocolError
from protocol.frame import FrameDecoder, encode_frame
from protocol.headers import SendMessageRequestHeaderV2, decode_send_header
from protocol.json_header import decode_json_header
from protocol.properties import decode_properties
from tests.reliability.conftest import V1_NAMES

SEND_CODES = (
    RequestCode.SEND_MESSAGE,
    RequestCode.SEND_MESSAGE_V2,
    RequestCode.SEND_BATCH_MESSAGE,
)
V2_NAMES = list("abcdefghijklmn")
HEADER_KEYS = ["code", "language", "version", "opaque", "flag", "remark", "extFields"]

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(1 << 70), 1 << 70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8) | st.sampled_from(V2_NAMES), inner, max_size=4)
    ),
    max_leaves=12,
)
header_objects = st.dictionaries(st.sampled_from(HEADER_KEYS) | st.text(max_size=6), json_values)
field_texts = (
    st.text(max_size=24)
    | st.from_regex(r"[+-]?[0-9]{1,25}", fullmatch=True)
    | st.sampled_from(["", "true", "FALSE", "1", "0", "-1", "2147483648", "9" * 30, "\x00", "٣"])
)


def valid_v2_fields() -> dict[str, str]:
    return SendMessageRequestHeaderV2(
        a="pg", b="TopicA", c="TBW102", d=4, e=0, f=0, g=1_700_000_000_000, h=0, i="TAGS\x01a"
    ).to_ext_fields()


@given(st.one_of(header_objects, json_values))
@settings(max_examples=400)
def test_any_json_value_as_a_header_decodes_or_raises_protocol_error(value: Any) -> None:
    text = json.dumps(value, allow_nan=True).encode()
    with contextlib.suppress(RemotingProtocolError):
        command = decode_json_header(text, None)
        assert all(isinstance(v, str) for v in command.ext_fields.values())
        assert all(-(1 << 31) <= n < 1 << 31 for n in (command.code, command.opaque, command.flag))


@given(
    st.sampled_from(SEND_CODES),
    st.dictionaries(st.sampled_from([*V1_NAMES, *V2_NAMES]) | st.text(max_size=4), field_texts),
)
@settings(max_examples=400)
def test_any_send_header_fields_parse_or_raise_header_field_error(
    code: int, fields: dict[str, str]
) -> None:
    with contextlib.suppress(HeaderFieldError):
        header = decode_send_header(code, fields)
        assert -(1 << 31) <= header.queue_id < 1 << 31
        assert -(1 << 63) <= header.born_timestamp < 1 << 63


@given(st.sampled_from(V2_NAMES), field_texts)
@settings(max_examples=300)
def test_one_bad_field_in_a_valid_v2_header_names_that_field(name: str, text: str) -> None:
    fields = {**valid_v2_fields(), name: text}
    try:
        decode_send_header(RequestCode.SEND_MESSAGE_V2, fields)
    except HeaderFieldError as exc:
        assert exc.field == name
        assert str(exc)


@given(st.binary(max_size=400))
@settings(max_examples=400)
def test_arbitrary_batch_bodies_split_or_raise_batch_body_error(body: bytes) -> None:
    with contextlib.suppress(BatchBodyError):
        for entry in decode_batch_body(body):
            decode_properties(entry.properties)


entries = st.builds(
    BatchEntry,
    st.integers(-(1 << 31), (1 << 31) - 1),
    st.binary(max_size=40),
    st.text(max_size=30),
)


@given(st.lists(entries, min_size=1, max_size=4), st.data())
@settings(max_examples=300)
def test_mutated_batch_bodies_split_or_raise_batch_body_error(
    batch: list[BatchEntry], data: st.DataObject
) -> None:
    body = bytearray(encode_batch_body(batch))
    for _ in range(data.draw(st.integers(1, 4))):
        body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(body)))
    with contextlib.suppress(BatchBodyError):
        decode_batch_body(bytes(body[:cut]))


def send_frame(serialize_type: SerializeType) -> bytes:
    command = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2,
        valid_v2_fields(),
        b"body" * 8,
        opaque=9,
        serialize_type=serialize_type,
    )
    return encode_frame(command)


@given(st.sampled_from(SerializeType), st.data())
@settings(max_examples=500)
def test_mutated_send_frames_decode_or_raise_only_protocol_errors(
    serialize_type: SerializeType, data: st.DataObject
) -> None:
    frame = bytearray(send_frame(serialize_type))
    kind = data.draw(st.sampled_from(["bytes", "length", "header_length", "splice"]))
    if kind == "bytes":
        for _ in range(data.draw(st.integers(1, 6))):
            frame[data.draw(st.integers(0, len(frame) - 1))] = data.draw(st.integers(0, 255))
    elif kind == "length":
        struct.pack_into(">i", frame, 0, data.draw(st.integers(-(1 << 31), (1 << 31) - 1)))
    elif kind == "header_length":
        word = struct.unpack_from(">i", frame, 4)[0] & ~0xFFFFFF
        struct.pack_into(">i", frame, 4, word | data.draw(st.integers(0, 0xFFFFFF)))
    else:
        at = data.draw(st.integers(8, len(frame)))
        frame[at:at] = data.draw(st.binary(min_size=1, max_size=16))
    decoder = FrameDecoder(max_frame_length=1 << 16)
    with contextlib.suppress(RemotingProtocolError):
        for command in decoder.feed(bytes(frame)):
            with contextlib.suppress(HeaderFieldError):
                header = decode_send_header(command.code, command.ext_fields)
                decode_properties(header.properties)
