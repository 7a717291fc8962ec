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
from json.encoder import encode_basestring
from typing import Any, Final

#: nesting deeper than this is refused (a hostile body must not exhaust the stack)
MAX_DEPTH: Final = 64
#: one token after optional white space: a string (its raw inside), a number, a literal or a
#: structural character; the regular expression engine does the per-character work
_TOKEN: Final = re.compile(
    r'[ \t\n\r]*(?:"((?:[^"\\\x00-\x1f]|\\.)*)"'
    r"|(-?(?:0|[1-9][0-9]*)(?:(\.[0-9]+)?([eE][-+]?[0-9]+)?))"
    r"|(true|false|null)|([{}\[\]:,]))",
    re.DOTALL,
)
_SPACE: Final = re.compile(r"[ \t\n\r]*")
_LITERALS: Final = {"true": True, "false": False, "null": None}
_STRING: Final = 0
_NUMBER: Final = 1
_LITERAL: Final = 2
_PUNCT: Final = 3
_END: Final = 4
#: `_TOKEN`'s groups: a match's last group says what it is
_STRING_GROUP: Final = 1
_LITERAL_GROUP: Final = 5
_PUNCT_GROUP: Final = 6


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
    kind = type(value)
    if kind is str:
        out.append(encode_basestring(value))  # type: ignore[arg-type]
    elif kind is int:
        out.append(str(value))
    elif kind is bool:
        out.append("true" if value else "false")
    elif value is None:
        out.append("null")
    elif isinstance(value, Mapping):
        entries = sorted((_key_text(key), item) for key, item in value.items() if item is not None)
        out.append("{")
        for i, ((_rank, text), item) in enumerate(entries):
            if i:
                out.append(",")
            out.append(text)
            out.append(":")
            _write(item, out)
        out.append("}")
    elif isinstance(value, list | tuple | set | frozenset):
        items = sorted(value) if isinstance(value, set | frozenset) else value
        out.append("[")
        for i, item in enumerate(items):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        out.append(json.dumps(value))


def _key_text(key: object) -> tuple[int, str]:
    """(rank, text) of a map key: strings and numbers first, then object keys."""
    if isinstance(key, ObjectKey):
        return (1, dumps(key.fields))
    if type(key) is str:
        return (0, encode_basestring(key))
    if type(key) is int:
        return (0, str(key))
    raise TypeError(f"a map key is a string, an integer or an ObjectKey, not {key!r}")


def loads(text: str | bytes) -> Any:
    """Standard JSON or fastjson's form; an object key that is a number reads as an int, one
    that is an object as an `ObjectKey`. Raises `FastjsonError`."""
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError as exc:
            raise FastjsonError(f"not UTF-8: {exc}") from None
    parser = _Parser(_tokens(text))
    value = parser.value(0)
    if parser.kinds[parser.pos] != _END:
        raise parser.error("extra text after the value")
    return value


def _tokens(text: str) -> tuple[list[int], list[Any], list[int]]:
    """(kinds, values, offsets) of the tokens of `text`, ending with an _END token."""
    kinds: list[int] = []
    values: list[Any] = []
    offsets: list[int] = []
    add_kind, add_value, add_offset = kinds.append, values.append, offsets.append
    match = _TOKEN.match
    pos, end = 0, len(text)
    while True:
        found = match(text, pos)
        if found is None:
            tail = _SPACE.match(text, pos)
            pos = tail.end() if tail else pos
            if pos == end:
                break
            raise FastjsonError(f"not JSON at character {pos}")
        group = found.lastindex or 0  # every alternative has a group
        add_offset(found.start(group) - (group == _STRING_GROUP))  # a string from its quote
        if group == _PUNCT_GROUP:
            add_kind(_PUNCT)
            add_value(found[group])
        elif group == _STRING_GROUP:
            raw = found[group]
            add_kind(_STRING)
            add_value(_string(raw, offsets[-1]) if "\\" in raw else raw)
        elif group == _LITERAL_GROUP:
            add_kind(_LITERAL)
            add_value(_LITERALS[found[group]])
        else:  # a number (group 2); groups 3 and 4 hold its fraction and exponent
            number = found[2]
            add_kind(_NUMBER)
            add_value(int(number) if found[3] is None and found[4] is None else float(number))
        pos = found.end()
    kinds.append(_END)
    values.append(None)
    offsets.append(end)
    return kinds, values, offsets


def _string(raw: str, offset: int) -> str:
    try:
        return str(json.loads(f'"{raw}"'))
    except ValueError as exc:
        raise FastjsonError(f"bad string at character {offset}: {exc}") from None


class _Parser:
    __slots__ = ("kinds", "offsets", "pos", "values")

    def __init__(self, tokens: tuple[list[int], list[Any], list[int]]) -> None:
        self.kinds, self.values, self.offsets = tokens
        self.pos = 0

    def error(self, problem: str) -> FastjsonError:
        return FastjsonError(f"{problem} at character {self.offsets[self.pos]}")

    def expect(self, char: str) -> None:
        if self.kinds[self.pos] != _PUNCT or self.values[self.pos] != char:
            raise self.error(f"expected {char!r}")
        self.pos += 1

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise self.error(f"nested deeper than {MAX_DEPTH}")
        kind, value = self.kinds[self.pos], self.values[self.pos]
        if kind == _PUNCT:
            if value == "{":
                return self.object(depth)
            if value == "[":
                return self.array(depth)
        elif kind != _END:
            self.pos += 1
            return value
        raise self.error("expected a value")

    def array(self, depth: int) -> list[Any]:
        self.pos += 1
        items: list[Any] = []
        if self.values[self.pos] == "]" and self.kinds[self.pos] == _PUNCT:
            self.pos += 1
            return items
        while True:
            items.append(self.value(depth + 1))
            if self.values[self.pos] == "," and self.kinds[self.pos] == _PUNCT:
                self.pos += 1
                continue
            self.expect("]")
            return items

    def object(self, depth: int) -> dict[Any, Any]:
        self.pos += 1
        result: dict[Any, Any] = {}
        if self.values[self.pos] == "}" and self.kinds[self.pos] == _PUNCT:
            self.pos += 1
            return result
        while True:
            key = self.key(depth)
            self.expect(":")
            result[key] = self.value(depth + 1)
            if self.values[self.pos] == "," and self.kinds[self.pos] == _PUNCT:
                self.pos += 1
                continue
            self.expect("}")
            return result

    def key(self, depth: int) -> str | int | ObjectKey:
        kind, value = self.kinds[self.pos], self.values[self.pos]
        if kind == _STRING:
            self.pos += 1
            return str(value)
        if kind == _PUNCT and value == "{":
            at = self.pos
            fields = self.object(depth + 1)
            if not all(isinstance(name, str) for name in fields):
                self.pos = at
                raise self.error("an object key's own keys must be strings")
            key = ObjectKey.of(fields)
            try:
                hash(key)
            except TypeError:  # a field of the key that is not hashable (a list)
                self.pos = at
                raise self.error("an object key holds only plain values") from None
            return key
        if kind == _NUMBER:
            if not isinstance(value, int):
                raise self.error("a number key must be an integer")
            self.pos += 1
            return value
        raise self.error("expected a key")
