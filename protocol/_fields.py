"""Parsing of custom-header (extFields) values, as RocketMQ's `decodeCommandCustomHeader` does.

Integers follow Java `parseInt`/`parseLong`: optional sign, ASCII digits, range-checked. Booleans
are true for "true" in any case and, unlike upstream, for "1" (the C++ client sends "0"/"1").
Errors are `HeaderFieldError`s naming the wire field.
"""

from __future__ import annotations

import re
from typing import Final

from .errors import HeaderFieldError

INT32_MIN: Final = -(1 << 31)
INT32_MAX: Final = (1 << 31) - 1
INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1
_SIGNED_DECIMAL: Final = re.compile(r"[+-]?[0-9]+")
_MAX_SHOWN: Final = 64


def parse_int(field: str, text: str) -> int:
    """`text` as a Java int; `HeaderFieldError` if it is not one."""
    if text.isdigit() and text.isascii() and len(text) < 10:
        return int(text)  # the common case: a short unsigned decimal needs no range check
    return _parse_integer(field, text, INT32_MIN, INT32_MAX, "int")


def parse_long(field: str, text: str) -> int:
    """`text` as a Java long; `HeaderFieldError` if it is not one."""
    if text.isdigit() and text.isascii() and len(text) < 19:
        return int(text)
    return _parse_integer(field, text, INT64_MIN, INT64_MAX, "long")


def parse_bool(text: str | None) -> bool:
    """True for "true" (any case) and "1"; everything else, absence included, is false."""
    return text is not None and (text in {"true", "1"} or text.lower() == "true")


def optional_int(field: str, text: str | None) -> int | None:
    return None if text is None else parse_int(field, text)


def optional_long(field: str, text: str | None) -> int | None:
    return None if text is None else parse_long(field, text)


def optional_bool(text: str | None) -> bool | None:
    return None if text is None else parse_bool(text)


def required(field: str, text: str | None) -> str:
    if text is None:
        raise HeaderFieldError.missing(field)
    return text


def bool_text(value: bool) -> str:
    return "true" if value else "false"


def _parse_integer(field: str, text: str, low: int, high: int, kind: str) -> int:
    if _SIGNED_DECIMAL.fullmatch(text) is None:
        raise HeaderFieldError(
            field, f"the custom field {field} is not a valid {kind}: {_shown(text)}"
        )
    digits = text.lstrip("+-").lstrip("0")
    # Java accepts any number of leading zeros; more than 20 significant digits is out of range
    # (and more than int() converts by default).
    value = 1 << 80 if len(digits) > 20 else int(digits or "0")
    if text.startswith("-"):
        value = -value
    if not low <= value <= high:
        raise HeaderFieldError(
            field, f"the custom field {field} is out of {kind} range: {_shown(text)}"
        )
    return value


def _shown(text: str) -> str:
    """`text` quoted and cut short: a remark must not echo a megabyte the peer sent."""
    shown = repr(text)
    return shown if len(shown) <= _MAX_SHOWN else shown[: _MAX_SHOWN - 4] + "...'"
