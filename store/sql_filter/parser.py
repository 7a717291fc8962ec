"""Parsing a SQL92 message selector into its tree, with 4.9's checks at compile time.

Precedence, loosest first, as in 4.9's grammar: OR; AND; `=`, `<>`, `IS [NOT] NULL`;
`> >= < <=`, `[NOT] BETWEEN x AND y`, `[NOT] IN ('s', ...)`; unary `+`, `-` and NOT (so
`NOT a = 1` is `(NOT a) = 1`: write `NOT (a = 1)`); literals, properties and parentheses.
Refused when compiled: an operand of `> >= < <=` (and BETWEEN) that is a string, boolean or
NULL literal or a condition; NULL as an operand of `=`/`<>` (use IS NULL); TRUE/FALSE compared
with a literal of another type; an IN whose left side is not a property or whose list holds
something other than strings; BETWEEN with literal bounds where the low one is the larger; a
whole number outside the long range; a decimal number that is 0 or beyond the double range (4.9
refuses `0.0`: write 0); a condition that is not boolean (`a + 1`, `5`). Expressions nested
deeper than `MAX_DEPTH` are refused too, so neither the parser nor an evaluation recurses far.
Unlike 4.9, which stops at the first token that cannot continue the expression and ignores the
rest (`a > 5 region = 'eu'` selected by `a > 5` alone), text left over is refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

from store.sql_filter.evaluate import UndecidableError, compare
from store.sql_filter.lexer import Kind, SqlFilterError, Token, tokenize
from store.sql_filter.nodes import (
    LONG_RANGE,
    And,
    BoolCast,
    Compare,
    Const,
    In,
    Negate,
    Node,
    Not,
    Num,
    NumKind,
    Op,
    Or,
    Prop,
    is_boolean,
    show,
)

#: nesting of parentheses, NOT and signs, and of the resulting tree, at most
MAX_DEPTH: Final = 40
_ORDERING: Final = {">": Op.GT, ">=": Op.GE, "<": Op.LT, "<=": Op.LE}
_SMALLEST_DOUBLE: Final = 5e-324


def parse(text: str) -> Node:
    """The tree of `text`; SqlFilterError says why it is refused."""
    return _Parser(tokenize(text)).parse()


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self._tokens = tokens
        self._pos = 0
        self._nesting = 0
        self._depth: dict[int, int] = {}
        #: every node made, so no id in `_depth` is reused while parsing
        self._made_nodes: list[Node] = []

    def parse(self) -> Node:
        node = self._or()
        end = self._peek()
        if end.kind is not Kind.END:
            raise SqlFilterError(f"unexpected {end.describe()} at column {end.column}")
        return self._boolean(node)

    # tokens

    def _peek(self, ahead: int = 0) -> Token:
        return self._tokens[min(self._pos + ahead, len(self._tokens) - 1)]

    def _is(self, text: str, ahead: int = 0) -> bool:
        token = self._peek(ahead)
        return token.kind in (Kind.KEYWORD, Kind.OPERATOR) and token.text == text

    def _take(self) -> Token:
        token = self._peek()
        self._pos += 1
        return token

    def _expect(self, text: str) -> Token:
        token = self._take()
        if token.kind not in (Kind.KEYWORD, Kind.OPERATOR) or token.text != text:
            raise SqlFilterError(
                f"expected '{text}' at column {token.column}, found {token.describe()}"
            )
        return token

    # tree

    def _made(self, node: Node, *children: Node) -> Node:
        depth = 1 + max((self._depth.get(id(c), 1) for c in children), default=0)
        if depth > MAX_DEPTH:
            raise SqlFilterError(f"the expression is nested deeper than {MAX_DEPTH} levels")
        self._depth[id(node)] = depth
        self._made_nodes.append(node)
        return node

    def _boolean(self, node: Node) -> Node:
        if is_boolean(node):
            return node
        if isinstance(node, Prop):
            return self._made(BoolCast(node), node)
        raise SqlFilterError(f"expression will not result in a boolean value: {show(node)}")

    def _nested(self, parse: Callable[[], Node]) -> Node:
        self._nesting += 1
        if self._nesting > MAX_DEPTH:
            raise SqlFilterError(f"the expression is nested deeper than {MAX_DEPTH} levels")
        try:
            return parse()
        finally:
            self._nesting -= 1

    # grammar, loosest first

    def _or(self) -> Node:
        operands = [self._and()]
        while self._is("OR"):
            self._take()
            operands.append(self._and())
        if len(operands) == 1:
            return operands[0]
        items = tuple(self._boolean(o) for o in operands)
        return self._made(Or(items), *items)

    def _and(self) -> Node:
        operands = [self._equality()]
        while self._is("AND"):
            self._take()
            operands.append(self._equality())
        if len(operands) == 1:
            return operands[0]
        items = tuple(self._boolean(o) for o in operands)
        return self._made(And(items), *items)

    def _equality(self) -> Node:
        left = self._comparison()
        while True:
            if self._is("=") or self._is("<>"):
                negated = self._take().text == "<>"
                right = self._comparison()
                _check_equal_operands(left, right)
                left = self._made(Compare(Op.EQ, left, right), left, right)
                if negated:
                    left = self._made(Not(left), left)
            elif self._is("IS"):
                self._take()
                negated = self._is("NOT")
                if negated:
                    self._take()
                self._expect("NULL")
                null = Const(None)
                left = self._made(Compare(Op.EQ, left, null), left, null)
                if negated:
                    left = self._made(Not(left), left)
            else:
                return left

    def _comparison(self) -> Node:
        left = self._unary()
        while True:
            token = self._peek()
            if token.kind is Kind.OPERATOR and token.text in _ORDERING:
                self._take()
                left = self._ordering(_ORDERING[token.text], left, self._unary())
            elif self._is("BETWEEN") or (self._is("NOT") and self._is("BETWEEN", 1)):
                left = self._between(left)
            elif self._is("IN") or (self._is("NOT") and self._is("IN", 1)):
                left = self._in(left)
            else:
                return left

    def _ordering(self, op: Op, left: Node, right: Node) -> Node:
        for operand in (left, right):
            if isinstance(operand, Const) and not isinstance(operand.value, Num):
                raise SqlFilterError(f"value {show(operand)} cannot be compared by {op.value}")
            if is_boolean(operand):
                raise SqlFilterError(f"condition {show(operand)} cannot be compared by {op.value}")
        return self._made(Compare(op, left, right), left, right)

    def _between(self, value: Node) -> Node:
        negated = self._take().text == "NOT"
        if negated:
            self._take()
        low = self._unary()
        self._expect("AND")
        high = self._unary()
        # as 4.9: only BETWEEN checks its literal bounds' order (NOT BETWEEN 10 AND 1 holds for
        # every number)
        if not negated and isinstance(low, Const) and isinstance(high, Const):
            if low.value is None or high.value is None:
                raise SqlFilterError("the bounds of BETWEEN cannot be NULL")
            try:
                wrong_way = compare(high.value, low.value) < 0
            except UndecidableError as exc:
                raise SqlFilterError(f"the bounds of BETWEEN do not compare: {exc}") from exc
            if wrong_way:
                raise SqlFilterError(
                    f"the low bound of BETWEEN ({show(low)}) is above the high one ({show(high)})"
                )
        if negated:
            items = (self._ordering(Op.LT, value, low), self._ordering(Op.GT, value, high))
            return self._made(Or(items), *items)
        items = (self._ordering(Op.GE, value, low), self._ordering(Op.LE, value, high))
        return self._made(And(items), *items)

    def _in(self, operand: Node) -> Node:
        negated = self._take().text == "NOT"
        if negated:
            self._take()
        if not isinstance(operand, Prop):
            raise SqlFilterError(f"IN needs a property on its left, got {show(operand)}")
        self._expect("(")
        values = [self._string()]
        while self._is(","):
            self._take()
            values.append(self._string())
        self._expect(")")
        return self._made(In(operand, frozenset(values), negated), operand)

    def _string(self) -> str:
        token = self._take()
        if token.kind is not Kind.STRING:
            raise SqlFilterError(
                f"IN lists strings only: found {token.describe()} at column {token.column}"
            )
        return token.text

    def _unary(self) -> Node:
        if self._is("+"):
            self._take()
            return self._nested(self._unary)
        if self._is("-"):
            self._take()
            operand = self._nested(self._unary)
            return self._made(Negate(operand), operand)
        if self._is("NOT"):
            self._take()
            operand = self._boolean(self._nested(self._unary))
            return self._made(Not(operand), operand)
        return self._primary()

    def _primary(self) -> Node:
        token = self._take()
        if token.kind is Kind.IDENT:
            return Prop(token.text)
        if token.kind is Kind.STRING:
            return Const(token.text)
        if token.kind is Kind.INTEGER:
            return Const(_whole_number(token))
        if token.kind is Kind.DECIMAL:
            return Const(_decimal_number(token))
        if token.kind is Kind.KEYWORD and token.text in ("TRUE", "FALSE", "NULL"):
            return Const(None if token.text == "NULL" else token.text == "TRUE")
        if token.kind is Kind.OPERATOR and token.text == "(":
            inner = self._nested(self._or)
            self._expect(")")
            return inner
        raise SqlFilterError(f"unexpected {token.describe()} at column {token.column}")


def _check_equal_operands(left: Node, right: Node) -> None:
    for operand in (left, right):
        if isinstance(operand, Const) and operand.value is None:
            raise SqlFilterError("NULL cannot be compared by = or <>: use IS NULL or IS NOT NULL")
    if (
        isinstance(left, Const)
        and isinstance(right, Const)
        and isinstance(left.value, bool)
        and not isinstance(right.value, bool)
    ):
        raise SqlFilterError(f"{show(left)} cannot be compared with {show(right)}")


def _whole_number(token: Token) -> Num:
    value = int(token.text.rstrip("lL"))
    if value > LONG_RANGE[1]:
        raise SqlFilterError(f"number {token.text} at column {token.column} exceeds a long")
    return Num(NumKind.INT if value < 2**31 else NumKind.LONG, value)


def _decimal_number(token: Token) -> Num:
    value = float(token.text)
    if math.isinf(value) or value < _SMALLEST_DOUBLE:
        raise SqlFilterError(
            f"number {token.text} at column {token.column} is out of the double range "
            "(4.9E-324 to 1.7976931348623157E308; 0 is written as a whole number)"
        )
    return Num(NumKind.DOUBLE, value)
