"""Evaluating a compiled SQL92 selector against a message's properties, as 4.9 does.

Three-valued logic: a missing property is unknown (None), a comparison with an unknown operand
is unknown, AND is FALSE once an operand is FALSE and OR is TRUE once one is TRUE, NOT keeps
unknown; only a TRUE result selects the message. `a IS NULL` is true when the message lacks
`a`; `a = b` is true when both are missing.

Properties are strings. Compared with a number, a string is read as that number's type (an
int literal reads it as a 32-bit int, so `a > 5` skips a = '5.5' or a = '3000000000'; a long
literal as a 64-bit long; a decimal literal as a double, as Java's Double.valueOf); two strings
under `> >= < <=` are both read as doubles; compared with TRUE or FALSE a string is true when it
is 'true' in any case. A string that does not read as the number makes the whole evaluation
fail, which, as in 4.9, means the message is not selected (even if an OR elsewhere would hold).
A bare property as a condition is FALSE (its value is a string, not a boolean).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Final

from store.sql_filter.nodes import (
    INT_RANGE,
    LONG_RANGE,
    And,
    BoolCast,
    Compare,
    Const,
    In,
    Node,
    Not,
    Num,
    NumKind,
    Op,
    Or,
    Prop,
    Value,
)

#: what Java's String.trim takes off both ends before Double.valueOf reads a number
_TRIMMED: Final = "".join(chr(c) for c in range(33))
_INTEGER_TEXT: Final = re.compile(r"[+-]?[0-9]+")
_DOUBLE_TEXT: Final = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
)


class UndecidableError(Exception):
    """The evaluation cannot go on (a string that is not the number it is compared with);
    4.9 catches the exception and does not select the message."""


def matches(root: Node, properties: Mapping[str, str]) -> bool:
    """Whether the message with `properties` is selected; never raises for any properties."""
    try:
        return evaluate(root, properties) is True
    except UndecidableError:
        return False


def _junction(operands: Sequence[Node], props: Mapping[str, str], *, decisive: bool) -> Value:
    """AND (`decisive` False) or OR (True): the decisive value as soon as an operand has it,
    else unknown if an operand was unknown, else the other value."""
    unknown = False
    for operand in operands:
        value = evaluate(operand, props)
        if value is decisive:
            return decisive
        unknown = unknown or value is None
    return None if unknown else not decisive


def evaluate(node: Node, props: Mapping[str, str]) -> Value:
    if isinstance(node, Prop):
        return props.get(node.name)
    if isinstance(node, Const):
        return node.value
    if isinstance(node, Compare):
        return _compare_node(node, props)
    if isinstance(node, And):
        return _junction(node.operands, props, decisive=False)
    if isinstance(node, Or):
        return _junction(node.operands, props, decisive=True)
    if isinstance(node, Not):
        value = evaluate(node.operand, props)
        return None if value is None else value is not True
    if isinstance(node, In):
        text = props.get(node.operand.name)
        if text is None:
            return None
        return (text in node.values) != node.negated
    if isinstance(node, BoolCast):
        value = evaluate(node.operand, props)
        return None if value is None else value is True
    value = evaluate(node.operand, props)
    if isinstance(value, Num):
        return Num(value.kind, -value.value)
    return None


def _compare_node(node: Compare, props: Mapping[str, str]) -> Value:
    left = evaluate(node.left, props)
    if node.op is Op.EQ:
        right = evaluate(node.right, props)
        if left is None:  # both missing: equal; only the left: unknown
            return True if right is None else None
        if right is None:
            return False
        return compare(left, right) == 0
    if left is None:
        return None
    right = evaluate(node.right, props)
    if right is None:
        return None
    if isinstance(left, str) and isinstance(right, str):
        left, right = read_number(left, NumKind.DOUBLE), read_number(right, NumKind.DOUBLE)
    answer = compare(left, right)
    if node.op is Op.GT:
        return answer > 0
    if node.op is Op.GE:
        return answer >= 0
    if node.op is Op.LT:
        return answer < 0
    return answer <= 0


def compare(left: Value, right: Value) -> int:
    """Java's ordering of two non-null values after 4.9's conversions: -1, 0 or 1. Values
    that do not convert to each other's type compare as -1 (unequal, and "less")."""
    assert left is not None and right is not None
    if isinstance(left, bool):
        if isinstance(right, bool):
            return int(left) - int(right)
        if isinstance(right, str):
            raise UndecidableError("a boolean cannot be compared with a string")
        return -1
    if isinstance(left, Num):
        if isinstance(right, Num):
            return _compare_numbers(left, right)
        if isinstance(right, str):
            return _compare_numbers(left, read_number(right, left.kind))
        return -1
    if isinstance(right, str):
        return 0 if left == right else (-1 if left < right else 1)
    if isinstance(right, bool):
        return int(left.lower() == "true") - int(right)
    return _compare_numbers(read_number(left, right.kind), right)


def _compare_numbers(left: Num, right: Num) -> int:
    if left.kind is NumKind.DOUBLE or right.kind is NumKind.DOUBLE:
        return _compare_doubles(float(left.value), float(right.value))
    return (left.value > right.value) - (left.value < right.value)


def _compare_doubles(a: float, b: float) -> int:
    """Double.compare: NaN equals itself and is above everything, -0.0 is below 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    a_nan, b_nan = math.isnan(a), math.isnan(b)
    if a_nan or b_nan:
        return int(a_nan) - int(b_nan)
    return int(math.copysign(1, a) > 0) - int(math.copysign(1, b) > 0)


def read_number(text: str, kind: NumKind) -> Num:
    """`text` as Java's Integer/Long/Double.valueOf read it; UndecidableError if it does not."""
    if kind is NumKind.DOUBLE:
        stripped = text.strip(_TRIMMED)
        if _DOUBLE_TEXT.fullmatch(stripped) is None:
            raise UndecidableError(f"{text!r} is not a double")
        number = stripped.rstrip("fFdD")
        return Num(kind, float(number.replace("Infinity", "inf")))
    if _INTEGER_TEXT.fullmatch(text) is None:
        raise UndecidableError(f"{text!r} is not a whole number")
    value = int(text)
    low, high = INT_RANGE if kind is NumKind.INT else LONG_RANGE
    if not low <= value <= high:
        raise UndecidableError(f"{text!r} is out of range")
    return Num(kind, value)
