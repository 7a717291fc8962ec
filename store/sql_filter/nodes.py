"""The compiled form of a SQL92 selector: values and the nodes of its tree.

Values are Java's as 4.9's evaluator sees them: None (unknown), a bool, a str (every property
of a message is one) or a `Num` that remembers whether it is an int, a long or a double, since a
string is converted to the number type it is compared with. AND and OR chains are one node
with all their operands, so a long `a = 1 OR a = 2 OR ...` is not a deep tree.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final


class NumKind(enum.IntEnum):
    """Java's number classes of the grammar, in their widening order."""

    INT = 0
    LONG = 1
    DOUBLE = 2


@dataclass(frozen=True, slots=True)
class Num:
    kind: NumKind
    value: int | float

    def __str__(self) -> str:
        return str(self.value)


Value = None | bool | str | Num

INT_RANGE: Final = (-(2**31), 2**31 - 1)
LONG_RANGE: Final = (-(2**63), 2**63 - 1)


@dataclass(frozen=True, slots=True)
class Const:
    value: Value


@dataclass(frozen=True, slots=True)
class Prop:
    name: str


@dataclass(frozen=True, slots=True)
class Negate:
    operand: Node


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node


@dataclass(frozen=True, slots=True)
class BoolCast:
    """A property used as a condition: FALSE unless its value is a boolean (never, for a
    message property), unknown when the message lacks it."""

    operand: Prop


@dataclass(frozen=True, slots=True)
class And:
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Or:
    operands: tuple[Node, ...]


class Op(enum.Enum):
    EQ = "="
    GT = ">"
    GE = ">="
    LT = "<"
    LE = "<="


@dataclass(frozen=True, slots=True)
class Compare:
    op: Op
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class In:
    operand: Prop
    values: frozenset[str]
    negated: bool


Node = Const | Prop | Negate | Not | BoolCast | And | Or | Compare | In


def is_boolean(node: Node) -> bool:
    """Whether 4.9 counts `node` as a boolean expression (TRUE, FALSE and NULL included)."""
    if isinstance(node, Const):
        return node.value is None or isinstance(node.value, bool)
    return isinstance(node, (Not, BoolCast, And, Or, Compare, In))


def show(node: Node) -> str:
    """`node` as text for an error message."""
    if isinstance(node, Const):
        value = node.value
        if value is None:
            return "NULL"
        if isinstance(value, bool):
            return "TRUE" if value else "FALSE"
        if isinstance(value, str):
            return "'" + value.replace("'", "''") + "'"
        return str(value)
    if isinstance(node, Prop):
        return node.name
    if isinstance(node, BoolCast):
        return show(node.operand)
    if isinstance(node, Negate):
        return f"-{show(node.operand)}"
    if isinstance(node, Not):
        return f"NOT {show(node.operand)}"
    if isinstance(node, (And, Or)):
        word = " AND " if isinstance(node, And) else " OR "
        return "(" + word.join(show(o) for o in node.operands) + ")"
    if isinstance(node, Compare):
        return f"({show(node.left)} {node.op.value} {show(node.right)})"
    listed = ", ".join(sorted(show(Const(v)) for v in node.values))
    return f"{show(node.operand)} {'NOT IN' if node.negated else 'IN'} ({listed})"
