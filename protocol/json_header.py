"""The JSON header serialization (serialize type 0), as fastjson writes and lenient peers send it.

Decoding accepts what real clients send (remoting-protocol spec, section 3): any key order,
missing keys, `remark` as "" / null / absent, `language` as a name or an int, extFields values as
strings, numbers or booleans, trailing whitespace, unknown keys. Every field is checked for type
and range; a wrong one in a request is reported in the command (`header_error`), so that the
request is answered rather than the connection closed. Encoding writes compact JSON in
fastjson's key order with extFields values as strings and `language` as its name.
This module knows nothing about frames; `frame.py` hands it the header bytes.
"""

from __future__ import annotations

import json
import struct
from json.encoder import encode_basestring_ascii
from typing import Any, Final

import orjson

from .codes import MQ_VERSION, LanguageCode, SerializeType
from .command import RESPONSE_FLAG, RemotingCommand
from .errors import HeaderFieldError, RemotingProtocolError

_INT32_MIN: Final = -(1 << 31)
_INT32_MAX: Final = (1 << 31) - 1
_LANGUAGE_BY_NAME: Final = {member.name: int(member) for member in LanguageCode}
_LANGUAGE_JSON: Final = {int(member): f'"{member.name}"' for member in LanguageCode}
_LANGUAGE_NAMES: Final = {int(member): member.name for member in LanguageCode}
_MAX_LANGUAGE: Final = 255
#: serializeTypeCurrentRPC is informational (the frame's header word decides): a name or absent
_SERIALIZE_NAMES: Final = (None, "JSON", "ROCKETMQ")
_MAX_SHOWN: Final = 64
_JSON: Final = SerializeType.JSON
_JSON_DECODER: Final = json.JSONDecoder()
_decode_json = _JSON_DECODER.decode
_scan_once = _JSON_DECODER.scan_once  # type: ignore[attr-defined]
_JSON_WHITESPACE: Final = " \t\n\r"
_ESCAPED_KEYS: Final[dict[str, str]] = {}
_MAX_ESCAPED_KEYS: Final = 256
_escape = encode_basestring_ascii
_orjson_loads = orjson.loads
_orjson_dumps = orjson.dumps
_FRAME_PREFIX: Final = struct.Struct(">ii")  # length, header word (serialize type JSON: 0)
#: what follows the variable ext fields in a send's answer (`encode_json_send_answer`)
_ANSWER_FLAG_LANGUAGE: Final = (
    f',"flag":{RESPONSE_FLAG},"language":{_LANGUAGE_JSON[LanguageCode.JAVA]},"opaque":'
)
_ANSWER_TAIL: Final = f',"serializeTypeCurrentRPC":"JSON","version":{MQ_VERSION}}}'


def decode_json_header(header: bytes | bytearray, body: bytes | None) -> RemotingCommand:
    """Decode a JSON header into a command carrying `body`.

    Raises `RemotingProtocolError` for text that is not UTF-8 JSON, a header that is not an
    object, or an opaque that is not an int32: nothing can be answered then. Any other field of
    the wrong type or range (code, language, version, flag, remark, extFields and its values,
    serializeTypeCurrentRPC) is a value: the command comes back with `header_error` set, so
    that the request is answered and the connection kept. In a response it raises, as nobody
    is waiting for an answer to it.
    """
    try:
        # orjson takes the bytes as they are (UTF-8 checked), three times faster than the
        # stdlib scanner. What it refuses (NaN, lone surrogates ...) goes the lenient stdlib
        # way, which decides whether the header is acceptable.
        obj = _orjson_loads(header)
    except orjson.JSONDecodeError:
        obj = _decode_lenient(header)
    if type(obj) is not dict:
        raise RemotingProtocolError(f"JSON header is a {type(obj).__name__}, not an object")
    get = obj.get
    code = get("code", 0)
    version = get("version", 0)
    opaque = get("opaque", 0)
    flag = get("flag", 0)
    language = get("language")
    remark = get("remark")
    ext_fields = get("extFields")
    if ext_fields is None:
        ext_fields = {}
    if not (
        type(code) is int
        and type(version) is int
        and type(opaque) is int
        and type(flag) is int
        and -2147483648 <= code <= 2147483647  # literals: cheaper than globals on this path
        and -2147483648 <= version <= 2147483647
        and -2147483648 <= opaque <= 2147483647
        and -2147483648 <= flag <= 2147483647
        and (type(remark) is str or remark is None)
        and type(ext_fields) is dict
        and get("serializeTypeCurrentRPC", "JSON") == "JSON"
    ):
        return _decode_checked(obj, header, body)
    if type(language) is str:
        language = _LANGUAGE_BY_NAME.get(language, LanguageCode.OTHER)
    elif language is None:
        language = LanguageCode.JAVA
    elif type(language) is not int or not 0 <= language <= 255:
        return _decode_checked(obj, header, body)
    try:
        "".join(ext_fields.values())  # a C-speed check that every value is a string
    except TypeError:
        return _decode_checked(obj, header, body)
    return RemotingCommand(
        code, language, version, opaque, flag, remark or None, ext_fields, body, _JSON
    )


def _decode_checked(
    obj: dict[str, Any], header: bytes | bytearray, body: bytes | None
) -> RemotingCommand:
    """The slow path: each field checked in turn, the first wrong one named."""
    opaque = _opaque(obj)
    try:
        flag = _int32(obj, "flag")
    except HeaderFieldError as exc:
        flag = 0  # unknown: answered as a request
        error: HeaderFieldError | None = exc
    else:
        error = None
    try:
        code = _int32(obj, "code")
    except HeaderFieldError as exc:
        code, error = 0, error or exc
    try:
        language = _language(obj.get("language"))
        version = _int32(obj, "version")
        remark = _remark(obj.get("remark"))
        serialize_type = obj.get("serializeTypeCurrentRPC")
        if serialize_type not in _SERIALIZE_NAMES:
            raise _field_error("serializeTypeCurrentRPC", "is not JSON or ROCKETMQ", serialize_type)
        ext_fields = _ext_fields(obj.get("extFields"), header)
    except HeaderFieldError as exc:
        error = error or exc
    if error is None:
        return RemotingCommand(code, language, version, opaque, flag, remark, ext_fields, body)
    if flag & RESPONSE_FLAG:
        raise RemotingProtocolError(str(error))
    return RemotingCommand(code, opaque=opaque, flag=flag, body=body, header_error=error)


def encode_json_header(command: RemotingCommand) -> bytes:
    """Compact JSON in fastjson's (alphabetical) key order; extFields always present.

    ASCII-only output (non-ASCII escaped). orjson writes the common case; text orjson would
    write as raw UTF-8 or refuses (a lone surrogate) is built by hand around the stdlib
    escaper instead. extFields values must be strings.
    """
    header: dict[str, object] = {
        "code": command.code,
        "extFields": command.ext_fields,
        "flag": command.flag,
        "language": _LANGUAGE_NAMES.get(command.language, command.language),
        "opaque": command.opaque,
    }
    if command.remark is not None:
        header["remark"] = command.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = command.version
    try:
        encoded = _orjson_dumps(header)
    except orjson.JSONEncodeError:
        return _encode_escaped(command)
    return encoded if encoded.isascii() else _encode_escaped(command)


def _encode_escaped(command: RemotingCommand) -> bytes:
    """`encode_json_header` by hand: every non-ASCII character escaped (`TypeError` for a
    value that is not a string)."""
    keys = _ESCAPED_KEYS
    fields = ",".join(
        [(keys.get(k) or _escape_key(k)) + _escape(v) for k, v in command.ext_fields.items()]
    )
    language = _LANGUAGE_JSON.get(command.language)
    if language is None:
        language = str(int(command.language))
    remark = command.remark
    remark_json = "" if remark is None else ',"remark":' + _escape(remark)
    return (
        f'{{"code":{command.code:d},"extFields":{{{fields}}},"flag":{command.flag:d},'
        f'"language":{language},"opaque":{command.opaque:d}{remark_json},'
        f'"serializeTypeCurrentRPC":"JSON","version":{command.version:d}}}'
    ).encode()


def _escape_key(key: str) -> str:
    """`"key":`, remembered for the few names responses use (msgId, queueId, MSG_REGION ...)."""
    escaped = _escape(key) + ":"
    if len(_ESCAPED_KEYS) < _MAX_ESCAPED_KEYS:
        _ESCAPED_KEYS[key] = escaped
    return escaped


def _decode_lenient(header: bytes | bytearray) -> Any:
    try:
        text = header.decode()
        # The C scanner that json.loads wraps, called directly; anything unusual (leading
        # whitespace, trailing garbage) takes the full path.
        obj, end = _scan_once(text, 0)
        if end != len(text) and text[end:].strip(_JSON_WHITESPACE):
            obj = _decode_json(text)
    except StopIteration:
        obj = _decode_full(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RemotingProtocolError(f"undecodable JSON header: {exc}") from None
    return obj


def _decode_full(text: str) -> Any:
    try:
        return _decode_json(text)
    except (ValueError, RecursionError) as exc:
        raise RemotingProtocolError(f"undecodable JSON header: {exc}") from None


def _opaque(obj: dict[str, Any]) -> int:
    """The opaque, without which no answer can be matched: a wrong one ends the connection."""
    try:
        return _int32(obj, "opaque")
    except HeaderFieldError as exc:
        raise RemotingProtocolError(str(exc)) from None


def _int32(obj: dict[str, Any], key: str) -> int:
    """An int field; null or absent is 0, as fastjson leaves a Java int."""
    value = obj.get(key)
    if value is None:
        return 0
    if type(value) is not int:
        raise _field_error(key, "is not an int", value)
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise _field_error(key, "is out of int32 range", value)
    return value


def _language(value: object) -> int:
    """A name (unknown ones are OTHER), a code that fits the binary header's byte, or null."""
    if value is None:
        return LanguageCode.JAVA
    if type(value) is str:
        return _LANGUAGE_BY_NAME.get(value, LanguageCode.OTHER)
    if type(value) is int and 0 <= value <= _MAX_LANGUAGE:
        return value
    raise _field_error("language", "is neither a language name nor a code 0-255", value)


def _remark(value: object) -> str | None:
    if value is None or type(value) is str:
        return value or None
    raise _field_error("remark", "is not a string", value)


def _ext_fields(value: object, header: bytes | bytearray) -> dict[str, str]:
    """extFields with numbers and booleans turned into their text (C++ and Node clients send
    them); null values are dropped, as a binary header cannot carry them."""
    if value is None:
        return {}
    if type(value) is not dict:
        raise _field_error("extFields", "is not an object", value)
    if all(type(v) is str for v in value.values()):
        return value
    # Integers past 64 bits become floats in orjson: read them exactly with the stdlib decoder.
    exact: dict[str, Any] = _decode_lenient(header)["extFields"]
    result: dict[str, str] = {}
    for key, item in exact.items():
        if type(item) is str:
            result[key] = item
        elif item is True or item is False:
            result[key] = "true" if item else "false"
        elif type(item) is int or type(item) is float:
            result[key] = str(item)  # a number field with a fraction fails its own parse
        elif item is not None:
            where = f"extFields[{_shown(key)}]"
            raise _field_error(key, "is not a string, number or boolean", item, where)
    return result


def _field_error(field: str, problem: str, value: object, where: str = "") -> HeaderFieldError:
    """`JSON header <field> <value> <problem>`, the value cut short."""
    return HeaderFieldError(field, f"JSON header {where or field} {_shown(value)} {problem}")


def _shown(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= _MAX_SHOWN else shown[: _MAX_SHOWN - 3] + "..."


def json_send_answer_prefix(fixed_ext: dict[str, str]) -> str | None:
    """The start of a SUCCESS answer's JSON header up to its variable ext fields: `fixed_ext`
    (the fields every answer of the connection carries, in order) encoded once, for
    `encode_json_send_answer`. None when one of them is not plain ASCII: such an answer goes
    through `encode_json_header`, which escapes it."""
    fields = "".join(
        f"{_orjson_dumps(key).decode()}:{_orjson_dumps(value).decode()},"
        for key, value in fixed_ext.items()
    )
    prefix = '{"code":0,"extFields":{' + fields
    return prefix if prefix.isascii() else None


def encode_json_send_answer(
    prefix: str, opaque: int, msg_id: str, queue_id: int, queue_offset: int
) -> bytes:
    """The whole frame of a send's SUCCESS answer, byte for byte what `encode_frame` writes for
    `make_response(SUCCESS, None, fixed_ext | {msgId, queueId, queueOffset})` of a JSON request,
    without the command and the generic encoder. `msg_id` is the store's (hex digits, commas)."""
    header = (
        f'{prefix}"msgId":"{msg_id}","queueId":"{queue_id:d}","queueOffset":"{queue_offset:d}"}}'
        f"{_ANSWER_FLAG_LANGUAGE}{opaque:d}{_ANSWER_TAIL}"
    ).encode("ascii")
    length = len(header)
    return _FRAME_PREFIX.pack(4 + length, length) + header
