"""JSON text as RocketMQ's fastjson writes it, map keys that are not strings included.

fastjson writes a `Map` whose keys are not strings with the key's own JSON as the key text:
a number unquoted (`{0:"127.0.0.1:10911"}`, a `brokerAddrs` table) and an object as a whole
object (`{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}`, a `MessageQueue` keyed
`offsetTable`). That is not JSON, so `json` can neither write nor read it. `dumps` writes it
(bean fields in fastjson's alphabetical order, compact, nulls left out as fastjson leaves out
null fields) and `loads` reads it back, along with standard JSON.

An object key is an `ObjectKey`: hashable, it keeps the key object's fields as sorted
(name, value) pairs; `ObjectKey.of({...})` builds one, `.fields` gives the dict back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

#: nesting deeper than this is refused (a hostile body must not exhaust the stack)
MAX_DEPTH: Final = 64
_NUMBER: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_SPACE: Final = re.compile(r"[ \t\n\r]*")
_DECODER: Final = json.JSONDecoder()
_LITERALS: Final = {"true": True, "false": False, "null": None}


@dataclass(frozen=True, slots=True)
class ObjectKey:
    """A map key that is an object (fastjson writes it as the object itself)."""

    items: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, fields: Mapping[str, Any]) -> ObjectKey:
        return cls(tuple(sorted(fields.items())))

    @property
    def fields(self) -> dict[str, Any]:
        return dict(self.items)


class FastjsonError(ValueError):
    """Text that is neither JSON nor fastjson's form of it; the message says where."""


def dumps(value: object) -> str:
    """`value` as fastjson writes it: compact, keys sorted, None values of objects left out."""
    parts: list[str] = []
    _write(value, parts)
    return "".join(parts)


def _write(value: object, out: list[str]) -> None:
    if isinstance(value, Mapping):
        out.append("{")
        first = True
        for key, item in sorted(value.items(), key=lambda kv: _key_order(kv[0])):
            if item is None:
                continue
            if not first:
                out.append(",")
            first = False
            _write_key(key, out)
            out.append(":")
            _write(item, out)
        out.append("}")
    elif isinstance(value, list | tuple | set | frozenset):
        out.append("[")
        items = sorted(value) if isinstance(value, set | frozenset) else value
        for i, item in enumerate(items):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        out.append(json.dumps(value, ensure_ascii=False))


def _write_key(key: object, out: list[str]) -> None:
    if isinstance(key, ObjectKey):
        _write(key.fields, out)
    elif isinstance(key, bool) or not isinstance(key, int | str):
        raise TypeError(f"a map key is a string, an integer or an ObjectKey, not {key!r}")
    else:
        out.append(str(key) if isinstance(key, int) else json.dumps(key, ensure_ascii=False))


def _key_order(key: object) -> tuple[int, str]:
    if isinstance(key, ObjectKey):
        return (1, dumps(key.fields))
    return (0, str(key))


def loads(text: str | bytes) -> Any:
    """Standard JSON or fastjson's form; an object key that is a number reads as an int, one
    that is an object as an `ObjectKey`. Raises `FastjsonError`."""
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError as exc:
            raise FastjsonError(f"not UTF-8: {exc}") from None
    parser = _Parser(text)
    value = parser.value(0)
    parser.skip_space()
    if parser.pos != len(text):
        raise parser.error("extra text after the value")
    return value


class _Parser:
    __slots__ = ("pos", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def error(self, problem: str) -> FastjsonError:
        return FastjsonError(f"{problem} at character {self.pos}")

    def skip_space(self) -> None:
        match = _SPACE.match(self.text, self.pos)
        self.pos = match.end() if match else self.pos

    def peek(self) -> str:
        self.skip_space()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, char: str) -> None:
        if self.peek() != char:
            raise self.error(f"expected {char!r}")
        self.pos += 1

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise self.error(f"nested deeper than {MAX_DEPTH}")
        char = self.peek()
        if char == "{":
            return self.object(depth)
        if char == "[":
            return self.array(depth)
        if char == '"':
            return self.string()
        for word, literal in _LITERALS.items():
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return literal
        return self.number()

    def string(self) -> str:
        try:
            text, self.pos = _DECODER.raw_decode(self.text, self.pos)
        except json.JSONDecodeError as exc:
            raise self.error(f"bad string: {exc.msg}") from None
        return str(text)

    def number(self) -> int | float:
        match = _NUMBER.match(self.text, self.pos)
        if match is None:
            raise self.error("expected a value")
        self.pos = match.end()
        if match[1] is None and match[2] is None:
            return int(match[0])
        return float(match[0])

    def array(self, depth: int) -> list[Any]:
        self.pos += 1
        items: list[Any] = []
        if self.peek() == "]":
            self.pos += 1
            return items
        while True:
            items.append(self.value(depth + 1))
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("]")
            return items

    def object(self, depth: int) -> dict[Any, Any]:
        self.pos += 1
        result: dict[Any, Any] = {}
        if self.peek() == "}":
            self.pos += 1
            return result
        while True:
            key = self.key(depth)
            self.expect(":")
            result[key] = self.value(depth + 1)
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("}")
            return result

    def key(self, depth: int) -> str | int | ObjectKey:
        char = self.peek()
        if char == '"':
            return self.string()
        if char == "{":
            fields = self.object(depth + 1)
            if not all(isinstance(name, str) for name in fields):
                raise self.error("an object key's own keys must be strings")
            key = ObjectKey.of(fields)
            try:
                hash(key)
            except TypeError:  # a field of the key that is not hashable (a list)
                raise self.error("an object key holds only plain values") from None
            return key
        number = self.number()
        if not isinstance(number, int):
            raise self.error("a number key must be an integer")
        return number
