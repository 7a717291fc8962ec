"""JSON as fastjson writes it for RocketMQ bodies whose maps have non-string keys.

fastjson (what 4.9's `RemotingSerializable` uses) writes a map key that is not a string as the
key's own JSON, unquoted: an `Integer` key as a bare number (`{0:5}`), a bean key such as a
`MessageQueue` as an object (`{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}`). Standard
JSON parsers refuse both, and a Java client reads a quoted key back as a string, not a bean, so
bodies like `ConsumeStats` and `ResetOffsetBody` must be written this way for the Java admin
tools to read them.

`dumps` writes such text: a key is a `str`, an `int`, or an `ObjectKey` (a bean key, its fields
in fastjson's alphabetical order); bean fields are written in the key order of the dicts given,
which callers keep alphabetical as fastjson does. `loads` reads it back, and reads standard
JSON too: an object key may be a string, an integer or an object (read as an `ObjectKey`).
Bad text raises `HeaderFieldError` (field "body").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any, Final

from .errors import HeaderFieldError

Scalar = str | int | float | bool | None
#: nesting past this is refused (a hostile body must not exhaust the stack)
MAX_DEPTH: Final = 64
_NUMBER: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_WHITESPACE: Final = re.compile(r"[ \t\n\r]*")
_LITERALS: Final[dict[str, Scalar]] = {"true": True, "false": False, "null": None}


@dataclass(frozen=True, slots=True)
class ObjectKey:
    """A map key written as a JSON object: its (field, value) pairs, sorted by field name
    (fastjson's bean order, and what makes two keys with the same fields equal)."""

    fields: tuple[tuple[str, Scalar], ...]

    @classmethod
    def of(cls, **fields: Scalar) -> ObjectKey:
        """A key with `fields` in alphabetical order, as fastjson writes a bean."""
        return cls(tuple(sorted(fields.items())))

    def as_dict(self) -> dict[str, Scalar]:
        return dict(self.fields)


def dumps(value: object) -> bytes:
    """`value` as fastjson's compact text (UTF-8, non-ASCII unescaped)."""
    parts: list[str] = []
    _write(value, parts)
    return "".join(parts).encode()


def _write(value: object, out: list[str]) -> None:
    if isinstance(value, dict):
        out.append("{")
        for index, (key, item) in enumerate(value.items()):
            if index:
                out.append(",")
            _write_key(key, out)
            out.append(":")
            _write(item, out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write(item, out)
        out.append("]")
    elif isinstance(value, float):
        out.append(repr(value))  # a Java double: 0.0, 1.5, 1.0E10 reads back the same
    else:
        out.append(json.dumps(value, ensure_ascii=False))


def _write_key(key: object, out: list[str]) -> None:
    if isinstance(key, ObjectKey):
        _write(key.as_dict(), out)
    elif isinstance(key, bool) or not isinstance(key, str | int):
        raise TypeError(f"a fastjson map key is a str, int or ObjectKey, not {key!r}")
    elif isinstance(key, int):
        out.append(str(key))
    else:
        out.append(json.dumps(key, ensure_ascii=False))


def loads(body: bytes, what: str) -> Any:
    """The value `body` holds; `HeaderFieldError` naming `what` when it is not fastjson text."""
    try:
        text = body.decode()
    except UnicodeDecodeError as exc:
        raise HeaderFieldError("body", f"{what} body is not UTF-8: {exc}") from None
    parser = _Parser(text, what)
    value = parser.value(0)
    parser.skip()
    if parser.pos != len(text):
        raise parser.error("trailing text")
    return value


class _Parser:
    __slots__ = ("pos", "text", "what")

    def __init__(self, text: str, what: str) -> None:
        self.text = text
        self.what = what
        self.pos = 0

    def error(self, problem: str) -> HeaderFieldError:
        return HeaderFieldError("body", f"{self.what} body is not valid: {problem} at {self.pos}")

    def skip(self) -> None:
        match = _WHITESPACE.match(self.text, self.pos)
        self.pos = match.end() if match else self.pos

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise self.error(f"nested deeper than {MAX_DEPTH}")
        self.skip()
        text, pos = self.text, self.pos
        char = text[pos : pos + 1]
        if char == "{":
            return self.object(depth)
        if char == "[":
            return self.array(depth)
        if char == '"':
            return self.string()
        for literal, result in _LITERALS.items():
            if text.startswith(literal, pos):
                self.pos = pos + len(literal)
                return result
        match = _NUMBER.match(text, pos)
        if match is None:
            raise self.error("expected a value")
        self.pos = match.end()
        if match.group(1) or match.group(2):
            return float(match.group())
        return int(match.group())

    def string(self) -> str:
        try:
            result, self.pos = scanstring(self.text, self.pos + 1, True)
        except ValueError as exc:
            raise self.error(f"bad string ({exc})") from None
        return str(result)

    def key(self, depth: int) -> str | int | ObjectKey:
        self.skip()
        char = self.text[self.pos : self.pos + 1]
        if char == '"':
            return self.string()
        if char == "{":
            fields = self.object(depth)
            values = list(fields.values())
            if not all(isinstance(k, str) for k in fields) or any(
                isinstance(v, dict | list) for v in values
            ):
                raise self.error("an object key holds a nested value")
            return ObjectKey(tuple(sorted(fields.items())))
        value = self.value(depth)
        if type(value) is not int:
            raise self.error("a key is not a string, an integer or an object")
        return value

    def expect(self, char: str) -> None:
        self.skip()
        if self.text[self.pos : self.pos + 1] != char:
            raise self.error(f"expected {char!r}")
        self.pos += 1

    def object(self, depth: int) -> dict[Any, Any]:
        self.pos += 1  # "{"
        result: dict[Any, Any] = {}
        self.skip()
        if self.text[self.pos : self.pos + 1] == "}":
            self.pos += 1
            return result
        while True:
            key = self.key(depth + 1)
            self.expect(":")
            result[key] = self.value(depth + 1)
            self.skip()
            char = self.text[self.pos : self.pos + 1]
            self.pos += 1
            if char == "}":
                return result
            if char != ",":
                self.pos -= 1
                raise self.error("expected ',' or '}'")

    def array(self, depth: int) -> list[Any]:
        self.pos += 1  # "["
        result: list[Any] = []
        self.skip()
        if self.text[self.pos : self.pos + 1] == "]":
            self.pos += 1
            return result
        while True:
            result.append(self.value(depth + 1))
            self.skip()
            char = self.text[self.pos : self.pos + 1]
            self.pos += 1
            if char == "]":
                return result
            if char != ",":
                self.pos -= 1
                raise self.error("expected ',' or ']'")
