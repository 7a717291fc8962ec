"""One configuration value read as its field's type: the parsing half of `broker.config`.

Strings (environment variables, flags) are parsed; values a TOML file already typed are
checked. Booleans take true/false, 1/0, yes/no, on/off; numbers are ASCII, finite and fit a
Java long, as RocketMQ's keys do; enums take a member's name in any case; an optional field
takes "" or "none" for None. A value that does not fit raises `ValueError` with the message;
`broker.config` names the key it belongs to.
"""

from __future__ import annotations

import enum
import math
import types
import typing
from typing import Any, Final

_TRUE: Final = frozenset({"true", "1", "yes", "on"})
_FALSE: Final = frozenset({"false", "0", "no", "off"})
_JAVA_LONG: Final = range(-(2**63), 2**63)


def coerce(value: object, hint: Any) -> object:
    """`value` as type `hint` (a field's annotation); ValueError when it is not one."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in {"", "none"}):
            return None
        hint = options[0]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _coerce_enum(value, hint)
    if hint is bool:
        return _coerce_bool(value)
    if hint is int:
        return _coerce_number(value, int)
    if hint is float:
        return _coerce_number(value, float)
    if hint is str:
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {value!r}")
        return value
    return value


def _coerce_enum(value: object, enum_type: type[enum.Enum]) -> enum.Enum:
    if isinstance(value, enum_type):
        return value
    text = str(value).strip().upper()
    try:
        return enum_type[text]
    except KeyError:
        choices = ", ".join(m.name for m in enum_type)
        raise ValueError(f"expected one of {choices}, got {value!r}") from None


def _coerce_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def _coerce_number(value: object, kind: type[int] | type[float]) -> int | float:
    what = "an integer" if kind is int else "a number"
    if isinstance(value, bool):
        raise ValueError(f"expected {what}, got {value!r}")
    if kind is int and isinstance(value, float):
        raise ValueError(f"expected an integer, got {value!r}")
    text = value if isinstance(value, str) else None
    try:
        if text is not None:
            # int() and float() also take other scripts' digits: only ASCII is a number here
            if not text.isascii():
                raise ValueError(text)
            number: int | float = kind(text.strip())
        elif isinstance(value, int | float):
            number = kind(value)
        else:
            raise ValueError(value)
    except ValueError:
        raise ValueError(f"expected {what}, got {value!r}") from None
    except OverflowError:
        raise ValueError(f"out of range: {value!r}") from None
    check_number(number, shown=value)
    return number


def check_number(value: object, shown: object = None) -> None:
    """Numbers are finite and fit a Java long, as RocketMQ's keys: a larger wait overflows when it
    becomes seconds. `shown` is the text the value was read from, for the message."""
    shown = value if shown is None else shown
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {shown!r}")
    if isinstance(value, int) and not isinstance(value, bool) and value not in _JAVA_LONG:
        raise ValueError(f"out of range: {shown!r}")
