"""Every JSON type into every field of every body a peer sends (issue #26).

For each body type a valid document is decoded with one field replaced by each JSON value (or
removed); the outcome must be the body decoded to exactly its annotated Python types, or
`HeaderFieldError` naming that field; and which one it is must match the field's kind (a name,
a text, an int32, a boolean ...). Hypothesis then feeds whole documents of any shape.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import types
import typing
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import HeaderFieldError
from protocol.lock_body import LockBatchBody
from protocol.route import ClusterInfo, ConsumerListBody, HeartbeatData, TopicRouteData

_ABSENT = object()
#: every JSON type with its edges: name -> value
VALUES: dict[str, Any] = {
    "absent": _ABSENT,
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
_TEXTS = {"digits", "empty", "long", "non_ascii", "nul"}
_OPTIONAL = {"absent", "null"}
#: field kind -> the value names it accepts; every other value is a HeaderFieldError
KINDS: dict[str, set[str]] = {
    "text": _TEXTS,
    "optional_text": _TEXTS | _OPTIONAL,
    "client_id": {"digits", "non_ascii"},  # printable, non-blank, at most 255 characters
    "group": {"digits"},  # [%|a-zA-Z0-9_-]{1,255}
    "topic": {"digits", "non_ascii"},  # a subscription topic: non-blank, printable, bounded
    "int32": {"zero", "small", "negative", "digits"},
    "optional_int32": {"zero", "small", "negative", "digits"} | _OPTIONAL,
    "optional_long": {"zero", "small", "negative", "digits"} | _OPTIONAL,
    "optional_bool": {"true", "false"} | _OPTIONAL,
    "enum": {"zero", *_TEXTS - {"empty"}} | _OPTIONAL,  # a name, or an ordinal in range
    "array_of_texts": _OPTIONAL,  # [1] has a number where a text belongs
    "array_of_ints": {"array"} | _OPTIONAL,
    "array_of_objects": _OPTIONAL,
    "required_object": set(),  # {"a": 1} lacks the required fields
    "table": _OPTIONAL,  # an object whose entries are typed: {"a": 1} is not
}

HEARTBEAT: dict[str, Any] = {
    "clientID": "10.0.0.5@123",
    "producerDataSet": [{"groupName": "pg"}],
    "consumerDataSet": [
        {
            "groupName": "cg",
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": 1,
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "unitMode": False,
            "subscriptionDataSet": [
                {
                    "topic": "T",
                    "subString": "a || b",
                    "classFilterMode": False,
                    "tagsSet": ["a", "b"],
                    "codeSet": [97, 98],
                    "subVersion": "1795332319343",
                    "expressionType": "TAG",
                }
            ],
        }
    ],
}
_SUB = "consumerDataSet[0].subscriptionDataSet[0]"
HEARTBEAT_FIELDS: dict[str, str] = {
    "clientID": "client_id",
    "producerDataSet": "array_of_objects",
    "producerDataSet[0]": "required_object",
    "producerDataSet[0].groupName": "text",
    "consumerDataSet": "array_of_objects",
    "consumerDataSet[0].groupName": "group",
    "consumerDataSet[0].consumeType": "enum",
    "consumerDataSet[0].messageModel": "enum",
    "consumerDataSet[0].consumeFromWhere": "enum",
    "consumerDataSet[0].unitMode": "optional_bool",
    "consumerDataSet[0].subscriptionDataSet": "array_of_objects",
    f"{_SUB}.topic": "topic",
    f"{_SUB}.subString": "optional_text",
    f"{_SUB}.classFilterMode": "optional_bool",
    f"{_SUB}.tagsSet": "array_of_texts",
    f"{_SUB}.tagsSet[0]": "text",
    f"{_SUB}.codeSet": "array_of_ints",
    f"{_SUB}.codeSet[0]": "int32",
    f"{_SUB}.subVersion": "optional_long",
    f"{_SUB}.expressionType": "optional_text",
}
ROUTE: dict[str, Any] = {
    "brokerDatas": [
        {"brokerAddrs": {"0": "127.0.0.1:10911"}, "brokerName": "broker-a", "cluster": "c"}
    ],
    "filterServerTable": {"s": ["10.0.0.1:1"]},
    "orderTopicConf": "broker-a:4",
    "queueDatas": [
        {
            "brokerName": "broker-a",
            "perm": 6,
            "readQueueNums": 4,
            "topicSysFlag": 0,
            "writeQueueNums": 4,
        }
    ],
}
ROUTE_FIELDS: dict[str, str] = {
    "queueDatas": "array_of_objects",
    "queueDatas[0].brokerName": "text",
    "queueDatas[0].readQueueNums": "int32",
    "queueDatas[0].writeQueueNums": "int32",
    "queueDatas[0].perm": "int32",
    "queueDatas[0].topicSysFlag": "optional_int32",
    "brokerDatas": "array_of_objects",
    "brokerDatas[0].cluster": "text",
    "brokerDatas[0].brokerName": "text",
    "brokerDatas[0].brokerAddrs": "table",
    "brokerDatas[0].brokerAddrs.0": "text",
    "orderTopicConf": "optional_text",
    "filterServerTable": "table",
    "filterServerTable.s": "array_of_texts",
    "filterServerTable.s[0]": "text",
}
CLUSTER: dict[str, Any] = {
    "brokerAddrTable": {
        "broker-a": {
            "brokerAddrs": {"0": "127.0.0.1:10911"},
            "brokerName": "broker-a",
            "cluster": "c",
        }
    },
    "clusterAddrTable": {"c": ["broker-a"]},
}
CLUSTER_FIELDS: dict[str, str] = {
    "brokerAddrTable": "required_object",
    "brokerAddrTable.broker-a": "required_object",
    "brokerAddrTable.broker-a.brokerName": "text",
    "clusterAddrTable": "required_object",
    "clusterAddrTable.c": "array_of_texts",
    "clusterAddrTable.c[0]": "text",
}
CONSUMER_LIST: dict[str, Any] = {"consumerIdList": ["a@1", "b@2"]}
CONSUMER_LIST_FIELDS = {"consumerIdList": "array_of_texts", "consumerIdList[0]": "text"}
LOCK_BATCH: dict[str, Any] = {
    "consumerGroup": "g",
    "clientId": "10.0.0.5@123",
    "mqSet": [{"topic": "T", "brokerName": "broker-a", "queueId": 3}],
}
LOCK_BATCH_FIELDS = {
    "consumerGroup": "group",
    "clientId": "client_id",
    "mqSet": "array_of_objects",
    "mqSet[0].topic": "topic",
    "mqSet[0].brokerName": "topic",  # the same rule: non-blank, printable, bounded
    "mqSet[0].queueId": "int32",
}

BODIES: dict[str, tuple[Callable[[bytes], object], dict[str, Any], dict[str, str]]] = {
    "heartbeat": (HeartbeatData.from_json, HEARTBEAT, HEARTBEAT_FIELDS),
    "route": (TopicRouteData.from_json, ROUTE, ROUTE_FIELDS),
    "cluster": (ClusterInfo.from_json, CLUSTER, CLUSTER_FIELDS),
    "consumer_list": (ConsumerListBody.from_json, CONSUMER_LIST, CONSUMER_LIST_FIELDS),
    "lock_batch": (LockBatchBody.from_json, LOCK_BATCH, LOCK_BATCH_FIELDS),
}
#: paths that are entries of a table (an object keyed by data, not by field names)
TABLE_ENTRIES = {
    "brokerDatas[0].brokerAddrs.0",
    "filterServerTable.s",
    "brokerAddrTable.broker-a",
    "clusterAddrTable.c",
}
CASES = [
    (body, path, value)
    for body, (_, _, fields) in BODIES.items()
    for path in fields
    for value in VALUES
]


def replaced(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`doc` with the field at `path` (`a[0].b`, keys split at dots) set to `value`."""
    doc = copy.deepcopy(doc)
    steps: list[str | int] = []
    for part in path.split("."):
        name, _, index = part.partition("[")
        steps.append(name)
        if index:
            steps.append(int(index.rstrip("]")))
    parent: Any = doc
    for step in steps[:-1]:
        parent = parent[step]
    if value is _ABSENT:
        del parent[steps[-1]]
    else:
        parent[steps[-1]] = value
    return doc


def assert_typed(value: object, hint: Any) -> None:
    """`value` is exactly of the type `hint` describes (bools are not ints here)."""
    origin = typing.get_origin(hint)
    if isinstance(hint, types.UnionType):
        assert any(_is(value, arg) for arg in hint.__args__), (value, hint)
    elif dataclasses.is_dataclass(hint):
        assert type(value) is hint
        hints = typing.get_type_hints(hint)
        for f in dataclasses.fields(hint):
            assert_typed(getattr(value, f.name), hints[f.name])
    elif origin is tuple:
        assert type(value) is tuple
        for item in value:
            assert_typed(item, typing.get_args(hint)[0])
    elif origin in (dict, list):
        assert type(value) is origin
        if origin is dict:
            key_hint, value_hint = typing.get_args(hint)
            for k, v in value.items():  # type: ignore[attr-defined]
                assert_typed(k, key_hint)
                assert_typed(v, value_hint)
        else:
            for item in value:  # type: ignore[attr-defined]
                assert_typed(item, typing.get_args(hint)[0])
    else:
        assert type(value) is hint, (value, hint)


def _is(value: object, hint: Any) -> bool:
    try:
        assert_typed(value, hint)
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize(("body", "path", "value"), CASES)
def test_every_json_type_in_every_field(body: str, path: str, value: str) -> None:
    decode, doc, fields = BODIES[body]
    data = json.dumps(replaced(doc, path, VALUES[value])).encode()
    # taking an element out of an array or an entry out of a table leaves a valid document
    entry = path.endswith("]") or path in TABLE_ENTRIES
    accepted = value in KINDS[fields[path]] or (value == "absent" and entry)
    try:
        decoded = decode(data)
    except HeaderFieldError as exc:
        assert not accepted, f"{body} {path}={value} refused: {exc}"
        assert exc.field.startswith(path), (exc.field, path)
        assert exc.field in str(exc)
        assert len(str(exc)) < 300
        return
    assert accepted, f"{body} {path}={value} was accepted"
    assert_typed(decoded, type(decoded))


def test_the_untouched_documents_decode() -> None:
    for decode, doc, _ in BODIES.values():
        decoded = decode(json.dumps(doc).encode())
        assert_typed(decoded, type(decoded))


_KEYS = {
    part.partition("[")[0]
    for _, _, fields in BODIES.values()
    for path in fields
    for part in path.split(".")
}


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(1 << 70), 1 << 70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(sorted(_KEYS)) | st.text(max_size=3), inner, max_size=5)
    ),
    max_leaves=20,
)


@pytest.mark.parametrize("body", sorted(BODIES))
@given(data=st.data())
@settings(max_examples=300)
def test_any_document_decodes_typed_or_raises_header_field_error(
    body: str, data: st.DataObject
) -> None:
    decode = BODIES[body][0]
    document = data.draw(st.dictionaries(st.sampled_from(sorted(_KEYS)), json_values))
    try:
        decoded = decode(json.dumps(document).encode())
    except HeaderFieldError:
        return
    assert_typed(decoded, type(decoded))
