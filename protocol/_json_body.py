"""Typed reads of the JSON bodies a peer sends, each field checked where it is decoded.

`JsonObject` wraps one decoded JSON object of a body (`heartbeat`, `topic route` ...) and its
path in it (`consumerDataSet[0].subscriptionDataSet[1]`). Each read checks that the value has the
JSON type of the Java field and, for numbers, its Java range, and raises `HeaderFieldError`
naming the field by its path (answered SYSTEM_ERROR) otherwise. Null reads as absent, as
fastjson leaves a Java field it does not set.

Where fastjson would coerce, the choice per type: a string field takes only a JSON string
(fastjson would turn a number into its text, but no client sends one where a name belongs, and
names key the broker's tables); a number field takes a JSON integer or its decimal text, read
as Java's `parseInt`/`parseLong` read it (the C++ client sends `subVersion` as text); a boolean
takes true/false only; an enum its name or its ordinal (the C++ client sends ordinals).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final, TypeVar

from ._fields import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, parse_int, parse_long
from .errors import HeaderFieldError

T = TypeVar("T")
_MISSING: Final[Any] = object()
_MAX_SHOWN: Final = 64
_JSON_NAMES: Final = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    list: "an array",
    dict: "an object",
    type(None): "null",
}


def load_object(body: bytes, what: str) -> JsonObject:
    """The body as a JSON object; `HeaderFieldError` (field "body") if it is not one."""
    try:
        obj = json.loads(body.decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise HeaderFieldError("body", f"{what} body is not valid JSON: {exc}") from None
    if type(obj) is not dict:
        raise HeaderFieldError("body", f"{what} body is not a JSON object")
    return JsonObject(obj, what)


class JsonObject:
    """One JSON object of a body; see the module docstring."""

    __slots__ = ("_obj", "path", "what")

    def __init__(self, obj: dict[str, Any], what: str, path: str = "") -> None:
        self._obj = obj
        self.what = what
        self.path = path

    def field(self, key: str) -> str:
        """The path of `key` in the body, as errors name it."""
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, problem: str) -> HeaderFieldError:
        field = self.field(key)
        return HeaderFieldError(field, f"{self.what} body {field} {problem}")

    def _get(self, key: str, default: Any) -> Any:
        value = self._obj.get(key)
        if value is None and default is _MISSING:
            raise self.error(key, "is missing")
        return value

    def _wrong(self, key: str, value: object, expected: str) -> HeaderFieldError:
        return self.error(key, f"is {describe(value)}, not {expected}")

    def text(self, key: str, default: str = _MISSING) -> str:
        """A string field; `default` when null or absent (required without one)."""
        value = self._get(key, default)
        if value is None:
            return default
        if type(value) is not str:
            raise self._wrong(key, value, "a string")
        return value

    def optional_text(self, key: str) -> str | None:
        value = self._obj.get(key)
        if value is None or type(value) is str:
            return value
        raise self._wrong(key, value, "a string")

    def name(self, key: str, check: Callable[[str, str], str]) -> str:
        """A required string held to a name rule (`protocol.names`), named in its error."""
        value = self.text(key)
        try:
            return check(self.field(key), value)
        except HeaderFieldError as exc:
            raise HeaderFieldError(exc.field, f"{self.what} body {exc}") from None

    def int32(self, key: str, default: int = _MISSING) -> int:
        return self._number(key, default, INT32_MIN, INT32_MAX, parse_int)

    def long(self, key: str, default: int = _MISSING) -> int:
        return self._number(key, default, INT64_MIN, INT64_MAX, parse_long)

    def _number(
        self, key: str, default: int, low: int, high: int, parse: Callable[[str, str], int]
    ) -> int:
        value = self._get(key, default)
        return default if value is None else self.number_value(key, value, low, high, parse)

    def number_value(
        self, key: str, value: object, low: int, high: int, parse: Callable[[str, str], int]
    ) -> int:
        if type(value) is str:
            try:
                return parse(self.field(key), value)
            except HeaderFieldError:
                problem = f"{_shown(value)} is not a number in [{low}, {high}]"
                raise self.error(key, problem) from None
        if type(value) is not int:
            raise self._wrong(key, value, "an integer")
        if not low <= value <= high:
            raise self.error(key, f"{_shown(value)} is out of range [{low}, {high}]")
        return value

    def int32_value(self, key: str, value: object) -> int:
        return self.number_value(key, value, INT32_MIN, INT32_MAX, parse_int)

    def boolean(self, key: str, default: bool = False) -> bool:
        value = self._obj.get(key)
        if value is None:
            return default
        if type(value) is not bool:
            raise self._wrong(key, value, "a boolean")
        return value

    def enum_name(self, key: str, names: tuple[str, ...], default: int) -> str:
        """An enum: its name as sent (names a newer client knows stay as they are), or the
        name of its ordinal."""
        value = self._obj.get(key)
        if value is None:
            return names[default]
        if type(value) is str:
            if not value:
                raise self.error(key, "is an empty enum name")
            return value
        if type(value) is int and 0 <= value < len(names):
            return names[value]
        raise self.error(key, f"{_shown(value)} is not one of {', '.join(names)} or its ordinal")

    def array(self, key: str) -> list[Any]:
        """An array field; empty when null or absent."""
        value = self._obj.get(key)
        if value is None:
            return []
        if type(value) is not list:
            raise self._wrong(key, value, "an array")
        return value

    def objects(self, key: str) -> list[JsonObject]:
        """An array of objects, each wrapped with its path."""
        return [self.object_value(f"{key}[{i}]", v) for i, v in enumerate(self.array(key))]

    def items(self, key: str, kind: Callable[[str, object], T]) -> list[T]:
        """An array whose elements `kind(path, element)` reads."""
        return [kind(f"{key}[{i}]", v) for i, v in enumerate(self.array(key))]

    def child(self, key: str, *, required: bool = False) -> JsonObject:
        """An object field, wrapped with its path; an empty one when null or absent and not
        `required`."""
        value = self._get(key, _MISSING if required else None)
        return self.object_value(key, {} if value is None else value)

    def entries(self) -> list[tuple[str, Any]]:
        """The (key, value) pairs of this object (keys are strings by JSON's rules)."""
        return list(self._obj.items())

    def object_value(self, key: str, value: object) -> JsonObject:
        if type(value) is not dict:
            raise self._wrong(key, value, "an object")
        return JsonObject(value, self.what, self.field(key))

    def text_value(self, key: str, value: object) -> str:
        if type(value) is not str:
            raise self._wrong(key, value, "a string")
        return value


def describe(value: object) -> str:
    """`a string` / `an integer` ... with the value, cut short, for an error remark."""
    kind = _JSON_NAMES.get(type(value), type(value).__name__)
    return kind if value is None else f"{kind} {_shown(value)}"


def _shown(value: object) -> str:
    """`value` as JSON writes it, cut short: a hostile value must not make the answer huge."""
    shown = json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= _MAX_SHOWN else shown[: _MAX_SHOWN - 3] + "..."
