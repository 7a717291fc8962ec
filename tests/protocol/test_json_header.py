"""JSON headers: what lenient peers send is accepted; what we emit is what fastjson emits."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import json_header
from protocol.codes import MQ_VERSION, LanguageCode, ResponseCode, SerializeType
from protocol.command import RemotingCommand
from protocol.errors import HeaderFieldError, RemotingProtocolError
from protocol.json_header import decode_json_header, encode_json_header
from tests.protocol.strategies import commands


def decode(text: str | bytes) -> RemotingCommand:
    return decode_json_header(text.encode() if isinstance(text, str) else text, None)


@given(commands(SerializeType.JSON))
@settings(max_examples=150)
def test_json_header_round_trip(cmd: RemotingCommand) -> None:
    assert decode_json_header(encode_json_header(cmd), cmd.body) == cmd


def test_emits_fastjson_shape_for_a_send_response() -> None:
    request = RemotingCommand.request(310, opaque=2)
    ext = {
        "msgId": "7F00000100002A9F0000000000000000",
        "queueId": "0",
        "queueOffset": "0",
        "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "true",
    }
    response = request.make_response(0, ext_fields=ext)
    assert encode_json_header(response) == (
        b'{"code":0,"extFields":{"msgId":"7F00000100002A9F0000000000000000","queueId":"0",'
        b'"queueOffset":"0","MSG_REGION":"DefaultRegion","TRACE_ON":"true"},"flag":1,'
        b'"language":"JAVA","opaque":2,"serializeTypeCurrentRPC":"JSON","version":407}'
    )


def test_emitted_header_is_compact_sorted_json_with_remark_when_set() -> None:
    cmd = RemotingCommand(17, LanguageCode.GO, 5, 9, 2, 'bad "topic" \x01 é', {"k": "v"})
    text = encode_json_header(cmd)
    obj = json.loads(text)
    assert text == json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()
    assert obj["remark"] == 'bad "topic" \x01 é'
    assert obj["language"] == "GO"
    assert text.isascii()


def test_unknown_language_int_is_emitted_as_int_and_read_back() -> None:
    cmd = RemotingCommand(1, language=99)
    assert json.loads(encode_json_header(cmd))["language"] == 99
    assert decode_json_header(encode_json_header(cmd), None).language == 99


def test_missing_keys_take_defaults() -> None:
    cmd = decode("{}")
    assert (cmd.code, cmd.version, cmd.opaque, cmd.flag) == (0, 0, 0, 0)
    assert cmd.language == LanguageCode.JAVA
    assert cmd.remark is None
    assert cmd.ext_fields == {}


def test_any_key_order_extra_keys_and_trailing_whitespace() -> None:
    cmd = decode(
        '{"version":63,"extFields":{"a":"1"},"opaque":7,"unknown":[1,{"x":null}],'
        '"serializeTypeCurrentRPC":"JSON","code":34,"language":"CPP","flag":2}\n \r\t'
    )
    assert (cmd.code, cmd.version, cmd.opaque, cmd.flag) == (34, 63, 7, 2)
    assert cmd.language == LanguageCode.CPP
    assert cmd.ext_fields == {"a": "1"}
    assert cmd.is_oneway


def test_leading_whitespace_is_accepted() -> None:
    assert decode(' \n{"code":5}').code == 5


@pytest.mark.parametrize("remark", ['"remark":"",', '"remark":null,', ""])
def test_empty_null_or_absent_remark_is_none(remark: str) -> None:
    assert decode("{" + remark + '"code":1}').remark is None


def test_language_as_int_or_unknown_name() -> None:
    assert decode('{"language":9}').language == LanguageCode.GO
    assert decode('{"language":13}').language == LanguageCode.NODE_JS
    assert decode('{"language":"COBOL"}').language == LanguageCode.OTHER
    assert decode('{"language":null}').language == LanguageCode.JAVA


def test_ext_field_numbers_and_booleans_become_strings() -> None:
    cmd = decode('{"extFields":{"d":4,"k":false,"m":true,"g":1795332302031,"x":"s","n":null}}')
    assert cmd.ext_fields == {
        "d": "4",
        "k": "false",
        "m": "true",
        "g": "1795332302031",
        "x": "s",
    }


def test_null_ext_fields_is_empty() -> None:
    assert decode('{"extFields":null}').ext_fields == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"opaque":1.5}', "opaque 1.5 is not an int"),
        ('{"opaque":2147483648}', "opaque 2147483648 is out of int32 range"),
        ('{"opaque":"7"}', "opaque '7' is not an int"),
        ('{"code":"10","flag":1}', "code '10' is not an int"),  # a response: nobody to answer
        ("[]", "is a list, not an object"),
        ('"text"', "is a str, not an object"),
        ('{"code":1} x', "undecodable"),
        ("", "undecodable"),
    ],
)
def test_headers_that_cannot_be_answered_raise(text: str, message: str) -> None:
    with pytest.raises(RemotingProtocolError, match=message):
        decode(text)


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ('{"code":"10"}', "code", "code '10' is not an int"),
        ('{"flag":true}', "flag", "flag True is not an int"),
        ('{"code":2147483648}', "code", "code 2147483648 is out of int32 range"),
        ('{"version":-2147483649}', "version", "out of int32 range"),
        ('{"extFields":[]}', "extFields", "extFields [] is not an object"),
        ('{"extFields":{"a":{"b":1}}}', "a", "extFields['a'] {'b': 1} is not a string, number"),
        ('{"remark":5}', "remark", "remark 5 is not a string"),
        ('{"remark":false}', "remark", "remark False is not a string"),
        ('{"language":[]}', "language", "language [] is neither a language name nor a code"),
        ('{"language":1000000000000000000000000000000}', "language", "language 1e+30"),
        ('{"language":256}', "language", "language 256 is neither"),
        ('{"serializeTypeCurrentRPC":"XML"}', "serializeTypeCurrentRPC", "'XML' is not JSON"),
    ],
)
def test_a_wrong_field_in_a_request_is_reported_in_the_command(
    text: str, field: str, message: str
) -> None:
    cmd = decode(text[:-1] + ',"opaque":9}')
    assert cmd.header_error is not None
    assert cmd.header_error.field == field
    assert message in str(cmd.header_error)
    assert cmd.header_error.response_code == ResponseCode.SYSTEM_ERROR
    assert cmd.opaque == 9
    assert not cmd.is_response


def test_a_request_with_a_wrong_field_keeps_its_valid_code_and_oneway_flag() -> None:
    cmd = decode('{"code":34,"opaque":5,"flag":2,"remark":[1]}')
    assert (cmd.code, cmd.opaque, cmd.is_oneway) == (34, 5, True)
    assert cmd.header_error is not None and cmd.header_error.field == "remark"
    bad_flag = decode('{"code":34,"opaque":5,"flag":"x"}')
    assert (bad_flag.code, bad_flag.flag) == (34, 0)  # answered as a request
    assert bad_flag.header_error is not None and bad_flag.header_error.field == "flag"


def test_a_long_wrong_value_is_cut_short_in_the_remark() -> None:
    cmd = decode('{"opaque":1,"remark":["' + "x" * 10_000 + '"]}')
    assert cmd.header_error is not None
    assert len(str(cmd.header_error)) < 120


def test_invalid_utf8_raises() -> None:
    with pytest.raises(RemotingProtocolError, match="undecodable"):
        decode(b'{"remark":"\xff"}')


def test_deep_nesting_raises_protocol_error() -> None:
    with pytest.raises(RemotingProtocolError):
        decode('{"x":' + "[" * 100_000 + "]" * 100_000 + "}")


def test_make_response_mirrors_opaque_and_serialize_type() -> None:
    request = RemotingCommand.request(
        310, {"a": "g"}, b"body", opaque=77, oneway=True, serialize_type=SerializeType.ROCKETMQ
    )
    assert request.is_oneway and not request.is_response
    response = request.make_response(13, "illegal")
    assert (response.code, response.opaque, response.flag) == (13, 77, 1)
    assert response.serialize_type is SerializeType.ROCKETMQ
    assert (response.language, response.version) == (LanguageCode.JAVA, MQ_VERSION)
    assert response.remark == "illegal"
    assert response.ext_fields == {}
    assert response.body is None
    assert response.is_response and not response.is_oneway


@pytest.mark.parametrize(
    ("text", "ext_fields"),
    [
        # Beyond what the fast decoder takes: a 100-bit number, NaN in a key nobody reads.
        (
            '{"code":10,"extFields":{"big":1267650600228229401496703205376}}',
            {"big": "1267650600228229401496703205376"},
        ),
        ('{"code":10,"extFields":{"a":"b"},"x":NaN}', {"a": "b"}),
    ],
)
def test_headers_the_fast_decoder_refuses_are_decoded_leniently(
    text: str, ext_fields: dict[str, str]
) -> None:
    cmd = decode(text)
    assert (cmd.code, cmd.ext_fields) == (10, ext_fields)


@given(commands(SerializeType.JSON))
@settings(max_examples=150)
def test_fast_and_lenient_decoders_agree(cmd: RemotingCommand) -> None:
    header = encode_json_header(cmd)
    assert orjson.loads(header) == json_header._decode_lenient(header)


@given(commands(SerializeType.JSON))
@settings(max_examples=150)
def test_fast_encoder_writes_what_the_escaping_encoder_writes(cmd: RemotingCommand) -> None:
    assert encode_json_header(cmd) == json_header._encode_escaped(cmd)


#: every JSON type, with the edges of each: name -> JSON text
JSON_VALUES: dict[str, str] = {
    "null": "null",
    "true": "true",
    "false": "false",
    "zero": "0",
    "small": "7",
    "negative": "-5",
    "int32_max": "2147483647",
    "int32_past": "2147483648",
    "huge": str(10**30),
    "float": "1.5",
    "negative_zero": "-0.0",
    "empty": '""',
    "long": json.dumps("x" * 100_000),
    "non_ascii": '"é中"',
    "nul": '"a\\u0000b"',
    "array": "[1]",
    "object": '{"a":1}',
}
_INTS = {"null", "zero", "small", "negative", "int32_max"}
_TEXTS = {"empty", "long", "non_ascii", "nul"}
#: header field -> the JSON values it accepts; every other one is a header error naming it
ACCEPTED: dict[str, set[str]] = {
    "code": _INTS,
    "version": _INTS,
    "flag": _INTS,
    "language": {"null", "zero", "small", *_TEXTS},  # unknown names are OTHER
    "remark": {"null", *_TEXTS},
    "extFields": {"null", "object"},
    "serializeTypeCurrentRPC": {"null"},
    "extFields.a": set(JSON_VALUES) - {"array", "object"},
}


def header_with(field: str, value: str) -> bytes:
    fields = {"code": "10", "opaque": "3", "flag": "0", "extFields": '{"b":"c"}'}
    if field == "extFields.a":
        fields["extFields"] = '{"a":' + value + "}"
    else:
        fields[field] = value
    return ("{" + ",".join(f'"{k}":{v}' for k, v in fields.items()) + "}").encode()


@pytest.mark.parametrize("value", sorted(JSON_VALUES))
@pytest.mark.parametrize("field", sorted(ACCEPTED))
def test_every_json_type_in_every_header_field(field: str, value: str) -> None:
    cmd = decode_json_header(header_with(field, JSON_VALUES[value]), None)
    assert cmd.opaque == 3
    if value in ACCEPTED[field]:
        assert cmd.header_error is None, cmd.header_error
        assert_well_typed(cmd)
    else:
        assert cmd.header_error is not None
        assert cmd.header_error.field == field.removeprefix("extFields.")
        assert str(cmd.header_error).startswith("JSON header ")
        assert cmd.code == (0 if field == "code" else 10)  # the code is kept when it is valid
        assert (cmd.ext_fields, cmd.remark) == ({}, None)


@pytest.mark.parametrize("value", sorted(JSON_VALUES))
def test_every_json_type_as_the_opaque_decodes_or_raises(value: str) -> None:
    text = '{"code":10,"opaque":' + JSON_VALUES[value] + "}"
    if value in _INTS:
        assert_well_typed(decode(text))
    else:
        with pytest.raises(RemotingProtocolError, match="JSON header opaque"):
            decode(text)


def assert_well_typed(cmd: RemotingCommand) -> None:
    for number in (cmd.code, cmd.version, cmd.opaque, cmd.flag):
        assert type(number) is int and -(1 << 31) <= number < 1 << 31
    assert isinstance(cmd.language, int) and 0 <= cmd.language <= 255  # an int or LanguageCode
    assert cmd.remark is None or (type(cmd.remark) is str and cmd.remark)
    assert type(cmd.ext_fields) is dict
    assert all(type(k) is str and type(v) is str for k, v in cmd.ext_fields.items())


def test_ext_field_numbers_keep_their_digits() -> None:
    cmd = decode('{"extFields":{"a":' + str(10**30) + ',"b":-0.0,"c":1.5}}')
    assert cmd.ext_fields == {"a": str(10**30), "b": "-0.0", "c": "1.5"}


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(1 << 70), 1 << 70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


@given(st.dictionaries(st.sampled_from([*ACCEPTED, "opaque"]), json_values))
@settings(max_examples=400)
def test_any_header_object_decodes_well_typed_or_names_its_bad_field(obj: dict[str, Any]) -> None:
    try:
        cmd = decode_json_header(json.dumps(obj).encode(), None)
    except RemotingProtocolError as exc:
        assert type(exc) is RemotingProtocolError
        return
    if cmd.header_error is None:
        assert_well_typed(cmd)
    else:
        assert type(cmd.header_error) is HeaderFieldError
        assert str(cmd.header_error).startswith("JSON header ")
