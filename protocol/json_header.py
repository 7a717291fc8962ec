"""The JSON header serialization (serialize type 0), as fastjson writes and lenient peers send it.

Decoding accepts what real clients send (remoting-protocol spec, section 3): any key order,
missing keys, `remark` as "" / null / absent, `language` as a name or an int, extFields values as
strings, numbers or booleans, trailing whitespace, unknown keys. Encoding writes compact JSON in
fastjson's key order with extFields values as strings and `language` as its name.
This module knows nothing about frames; `frame.py` hands it the header bytes.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from typing import Any, Final

import orjson

from .codes import LanguageCode, SerializeType
from .command import RemotingCommand
from .errors import RemotingProtocolError

_INT32_MIN: Final = -(1 << 31)
_INT32_MAX: Final = (1 << 31) - 1
_LANGUAGE_BY_NAME: Final = {member.name: int(member) for member in LanguageCode}
_LANGUAGE_JSON: Final = {int(member): f'"{member.name}"' for member in LanguageCode}
_LANGUAGE_NAMES: Final = {int(member): member.name for member in LanguageCode}
_INT_KEYS: Final = ("code", "version", "opaque", "flag")
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


def decode_json_header(header: bytes | bytearray, body: bytes | None) -> RemotingCommand:
    """Decode a JSON header into a command carrying `body`.

    Raises `RemotingProtocolError` for text that is not UTF-8 JSON, a header that is not an
    object, non-integer (or out of int32 range) code/version/opaque/flag, or ill-typed
    language/remark/extFields.
    """
    try:
        # orjson takes the bytes as they are (UTF-8 checked), three times faster than the
        # stdlib scanner. What it refuses (NaN, integers past 64 bits, lone surrogates ...)
        # goes the lenient stdlib way, which decides whether the header is acceptable.
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
    if not (
        type(code) is int
        and type(version) is int
        and type(opaque) is int
        and type(flag) is int
        and -2147483648 <= code <= 2147483647  # literals: cheaper than globals on this path
        and -2147483648 <= version <= 2147483647
        and -2147483648 <= opaque <= 2147483647
        and -2147483648 <= flag <= 2147483647
    ):
        code, version, opaque, flag = (_int_field(obj, key) for key in _INT_KEYS)
    language = get("language")
    if type(language) is str:
        language = _LANGUAGE_BY_NAME.get(language, LanguageCode.OTHER)
    elif type(language) is not int:
        language = _language_fallback(language)
    remark = get("remark")
    if not remark:
        remark = None
    elif type(remark) is not str:
        raise RemotingProtocolError(f"JSON header remark is a {type(remark).__name__}")
    ext_fields = get("extFields")
    if ext_fields is None:
        ext_fields = {}
    elif type(ext_fields) is not dict:
        raise RemotingProtocolError("JSON header extFields is not an object")
    else:
        try:
            "".join(ext_fields.values())  # a C-speed check that every value is a string
        except TypeError:
            # Numbers in extFields (C++ and Node clients) are kept as written, which orjson
            # does not do for integers past 64 bits: read them with the stdlib decoder.
            lenient = _decode_lenient(header)["extFields"]
            ext_fields = _stringify_ext_fields(lenient)
    return RemotingCommand(code, language, version, opaque, flag, remark, ext_fields, body, _JSON)


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


def _int_field(obj: dict[str, Any], key: str) -> int:
    """Slow path: name the integer field that is wrong. Null counts as absent (fastjson)."""
    value = obj.get(key)
    if value is None:
        return 0
    if type(value) is not int:
        raise RemotingProtocolError(f"JSON header {key} is a {type(value).__name__}, not an int")
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise RemotingProtocolError(f"JSON header {key} {value} is out of int32 range")
    return value


def _language_fallback(language: object) -> int:
    if language is None:
        return LanguageCode.JAVA
    raise RemotingProtocolError(f"JSON header language is a {type(language).__name__}")


def _stringify_ext_fields(ext_fields: dict[str, Any]) -> dict[str, str]:
    """extFields with numbers and booleans turned into their text (C++ and Node clients)."""
    result: dict[str, str] = {}
    for key, value in ext_fields.items():
        if type(value) is str:
            result[key] = value
        elif value is True:
            result[key] = "true"
        elif value is False:
            result[key] = "false"
        elif type(value) is int or type(value) is float:
            result[key] = str(value)
        elif value is not None:  # null values are dropped, as a binary header cannot carry them
            raise RemotingProtocolError(
                f"JSON header extFields value for {key!r} is a {type(value).__name__}"
            )
    return result
