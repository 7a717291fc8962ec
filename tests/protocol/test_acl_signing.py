"""Request signatures: the signed content, HMAC-SHA1 + base64, and the client's signing.

The content rule is upstream's `AclUtils.combineRequestContent`: extFields values sorted by key
(Java string order), `Signature` left out, then the body. Interoperability with a real client
is in tests/integration/test_cpp_acl.py; here the edge cases: reordered fields, tampering,
empty and absent bodies, unicode, and arbitrary signatures that must never raise.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.acl_signing import (
    ACCESS_KEY,
    SIGNATURE,
    SessionCredentials,
    cal_signature,
    combine_request_content,
    request_signature,
    sign_request,
    signature_matches,
)
from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder, encode_frame

CREDENTIALS = SessionCredentials("RocketMQ", "12345678")


def signed(fields: dict[str, str], body: bytes | None) -> RemotingCommand:
    command = RemotingCommand.request(RequestCode.SEND_MESSAGE, dict(fields), body)
    sign_request(command, CREDENTIALS)
    return command


def verifies(command: RemotingCommand, secret: str = "12345678") -> bool:
    expected = request_signature(command.ext_fields, command.body, secret)
    return signature_matches(expected, command.ext_fields.get(SIGNATURE))


def test_hmac_sha1_base64_matches_rfc_2202_vector() -> None:
    digest = bytes.fromhex("effcdf6ae5eb2fa2d27416d5f184df9c259a7c79")
    assert cal_signature(b"what do ya want for nothing?", "Jefe") == base64.b64encode(
        digest
    ).decode("ascii")


def test_content_is_sorted_values_then_body_without_signature() -> None:
    fields = {"topic": "T", "AccessKey": "ak", "Signature": "zzz", "b": "2", "a": "1"}
    # Java order: upper case before lower case ("AccessKey" < "a" < "b" < "topic").
    assert combine_request_content(fields, b"BODY") == b"ak12TBODY"


def test_unique_key_query_flag_is_left_out_by_the_broker() -> None:
    fields = {"a": "1", "_UNIQUE_KEY_QUERY": "true"}
    assert combine_request_content(fields, None) == b"1"


def test_keys_sort_as_java_strings_not_as_code_points() -> None:
    # By code point U+FF21 < U+1F600; in UTF-16 the pair's first unit 0xD83D < 0xFF21, so
    # Java's TreeMap puts the emoji key first.
    fields = {"\uff21": "x", "\U0001f600": "y"}
    assert combine_request_content(fields, None) == b"yx"
    assert sorted(fields) == ["\uff21", "\U0001f600"]  # Python's order differs


def test_signed_request_verifies_and_carries_the_access_key() -> None:
    command = signed({"topic": "TopicA", "queueId": "3"}, b"hello")
    assert command.ext_fields[ACCESS_KEY] == "RocketMQ"
    assert verifies(command)
    assert not verifies(command, secret="12345679")


def test_field_order_on_the_wire_does_not_matter() -> None:
    command = signed({"z": "1", "a": "2", "m": "3"}, b"x")
    reordered = RemotingCommand.request(
        command.code, dict(reversed(list(command.ext_fields.items()))), command.body
    )
    assert list(reordered.ext_fields) != list(command.ext_fields)
    assert verifies(reordered)


def test_tampering_with_a_field_or_the_body_breaks_the_signature() -> None:
    command = signed({"topic": "TopicA"}, b"hello")
    command.ext_fields["topic"] = "TopicB"
    assert not verifies(command)
    command = signed({"topic": "TopicA"}, b"hello")
    command.body = b"hellO"
    assert not verifies(command)
    command = signed({"topic": "TopicA"}, b"hello")
    command.ext_fields["extra"] = ""  # an added empty field changes nothing in the content
    assert verifies(command)
    command.ext_fields["extra"] = "x"
    assert not verifies(command)


def test_moving_bytes_between_fields_is_not_detected_as_upstream() -> None:
    # The content is a plain concatenation: upstream shares this property, and so must we to
    # verify its clients' signatures. The test pins it so that a change is deliberate.
    command = signed({"a": "xy", "b": "z"}, None)
    command.ext_fields.update(a="x", b="yz")
    assert verifies(command)


def test_empty_and_absent_bodies_sign_alike() -> None:
    with_empty = signed({"topic": "T"}, b"")
    without = signed({"topic": "T"}, None)
    assert with_empty.ext_fields[SIGNATURE] == without.ext_fields[SIGNATURE]
    assert verifies(with_empty) and verifies(without)


def test_unicode_properties_are_signed_as_utf8() -> None:
    props = "TAGS\x01Tä\x02ключ\x01значение\x02emoji\x01\U0001f680\x02"
    command = signed({"properties": props}, "тело".encode())
    content = ("RocketMQ" + props).encode() + "тело".encode()  # "AccessKey" < "properties"
    expected = base64.b64encode(hmac.new(b"12345678", content, hashlib.sha1).digest()).decode()
    assert command.ext_fields[SIGNATURE] == expected


def test_signature_survives_the_wire() -> None:
    command = signed({"properties": "k\x01vä\x02", "topic": "TopicA"}, b"\x00\xff" * 100)
    (decoded,) = FrameDecoder().feed(encode_frame(command))
    assert verifies(decoded)


def test_lone_surrogates_are_signed_as_question_marks() -> None:
    assert combine_request_content({"a": "x\ud800y"}, None) == b"x?y"


def test_credentials_never_show_the_secret() -> None:
    credentials = SessionCredentials("RocketMQ", "s3cr3t-value", security_token="tok3n-value")
    assert "s3cr3t-value" not in repr(credentials)
    assert "tok3n-value" not in repr(credentials)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.text(max_size=8), st.text(max_size=16), max_size=6),
    st.binary(max_size=64),
    st.one_of(
        st.none(),
        st.text(max_size=40),
        st.binary(max_size=40).map(base64.b64encode).map(bytes.decode),
    ),
)
def test_arbitrary_signatures_never_raise_and_never_match(
    fields: dict[str, str], body: bytes, given_signature: str | None
) -> None:
    expected = request_signature(fields, body, "12345678")
    assert signature_matches(expected, given_signature) is (given_signature == expected)
    assert signature_matches(expected, expected)
