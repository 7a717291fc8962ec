"""JSON headers: what lenient peers send is accepted; what we emit is what fastjson emits."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings

from protocol import json_header
from protocol.codes import MQ_VERSION, LanguageCode, SerializeType
from protocol.command import RemotingCommand
from protocol.errors import RemotingProtocolError
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
        ('{"code":"10"}', "code is a str"),
        ('{"opaque":1.5}', "opaque is a float"),
        ('{"flag":true}', "flag is a bool"),
        ('{"code":2147483648}', "out of int32 range"),
        ('{"extFields":[]}', "extFields is not an object"),
        ('{"extFields":{"a":{"b":1}}}', "value for 'a' is a dict"),
        ('{"remark":5}', "remark is a int"),
        ('{"language":[]}', "language is a list"),
        ("[]", "is a list, not an object"),
        ('"text"', "is a str, not an object"),
        ('{"code":1} x', "undecodable"),
        ("", "undecodable"),
    ],
)
def test_malformed_headers_raise(text: str, message: str) -> None:
    with pytest.raises(RemotingProtocolError, match=message):
        decode(text)


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
