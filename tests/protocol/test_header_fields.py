"""Every JSON type into every extFields field of every request header (issue #26).

A request's custom header travels in the JSON header's extFields, where numbers and booleans
become their text (C++ and Node clients send them) and arrays or objects make the request a
header error. For each header class and each of its wire fields, a valid header with that one
field replaced by each JSON value must decode to exactly the field's Java kind (str, int32,
int64, bool, a group name or a client id) or raise `HeaderFieldError` naming that field.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest

from protocol._fields import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from protocol.codes import RequestCode
from protocol.consumer_headers import wire_fields
from protocol.errors import HeaderFieldError
from protocol.headers import decode_send_header
from protocol.json_header import decode_json_header
from tests.protocol.test_headers import OTHER_HEADERS, V1_SAMPLE, V2_SAMPLE

VALUES: dict[str, Any] = {
    "null": None,
    "true": True,
    "false": False,
    "zero": 0,
    "small": 7,
    "negative": -5,
    "huge": 10**30,
    "float": 1.5,
    "negative_zero": -0.0,
    "digits": "42",
    "empty": "",
    "long": "x" * 100_000,
    "non_ascii": "é中",
    "nul": "a\x00b",
    "array": [1],
    "object": {"a": 1},
}
_GROUP = re.compile(r"[%|a-zA-Z0-9_-]{1,255}")
#: a valid text for each kind, the base every case starts from
_VALID = {"str": "x", "int": "1", "long": "2", "bool": "true", "group": "g", "client_id": "c@1"}


def text_of(value: Any) -> str | None:
    """What the JSON header decoder makes of an extFields value (None: dropped)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value) if isinstance(value, bool) else str(value)


def accepts(kind: str, text: str) -> bool:
    if kind in ("str", "bool"):
        return True
    if kind == "group":
        return _GROUP.fullmatch(text) is not None
    if kind == "client_id":
        return bool(text.strip()) and len(text) <= 255 and not re.search(r"[\x00-\x1f\x7f]", text)
    low, high = (INT32_MIN, INT32_MAX) if kind == "int" else (INT64_MIN, INT64_MAX)
    return re.fullmatch(r"[+-]?[0-9]+", text) is not None and low <= int(text) <= high


def decoded_ext_fields(ext_fields: dict[str, Any]) -> dict[str, str] | None:
    """extFields as the broker sees them, or None when the JSON header decoder refused them."""
    header = json.dumps({"code": 11, "opaque": 1, "extFields": ext_fields}).encode()
    command = decode_json_header(header, None)
    return None if command.header_error is not None else command.ext_fields


HEADER_CASES = [
    (cls, field, value) for cls in OTHER_HEADERS for field in wire_fields(cls) for value in VALUES
]


@pytest.mark.parametrize(
    ("cls", "field", "value"),
    HEADER_CASES,
    ids=[f"{cls.__name__}.{field[1]}={value}" for cls, field, value in HEADER_CASES],
)
def test_every_json_type_in_every_header_field(
    cls: type[Any], field: tuple[str, str, str, bool], value: str
) -> None:
    attribute, wire, kind, required = field
    base = {w: _VALID[k] for _a, w, k, _r in wire_fields(cls)}
    ext = decoded_ext_fields({**base, wire: VALUES[value]})
    text = text_of(VALUES[value])
    if ext is None:
        assert value in ("array", "object")
        return
    expected_ok = not required if text is None else accepts(kind, text)
    try:
        header = cls.from_ext_fields(ext)
    except HeaderFieldError as exc:
        assert not expected_ok, f"{wire}={value!r} refused: {exc}"
        assert exc.field == wire
        assert len(str(exc)) < 300
        return
    assert expected_ok, f"{wire}={value!r} accepted"
    got = getattr(header, attribute)
    if text is None:  # absent: the field's default
        assert got == {f.name: f.default for f in dataclasses.fields(cls)}[attribute]
    else:
        assert type(got) is {"int": int, "long": int, "bool": bool}.get(kind, str)


SEND_CASES = [
    (code, wire, value)
    for code, sample in (
        (RequestCode.SEND_MESSAGE, V1_SAMPLE),
        (RequestCode.SEND_MESSAGE_V2, V2_SAMPLE),
    )
    for wire in sample
    for value in VALUES
]


@pytest.mark.parametrize(("code", "wire", "value"), SEND_CASES)
def test_every_json_type_in_every_required_send_field(code: int, wire: str, value: str) -> None:
    sample = V1_SAMPLE if code == RequestCode.SEND_MESSAGE else V2_SAMPLE
    ext = decoded_ext_fields({**sample, wire: VALUES[value]})
    if ext is None:
        assert value in ("array", "object")
        return
    try:
        header = decode_send_header(code, ext)
    except HeaderFieldError as exc:
        assert exc.field == wire
        assert len(str(exc)) < 300
        return
    for name in ("producer_group", "topic", "default_topic"):
        assert type(getattr(header, name)) is str
    for name in ("default_topic_queue_nums", "queue_id", "sys_flag", "flag"):
        assert INT32_MIN <= getattr(header, name) <= INT32_MAX
    assert INT64_MIN <= header.born_timestamp <= INT64_MAX
