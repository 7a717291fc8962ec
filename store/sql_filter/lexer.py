"""The tokens of a SQL92 message selector, as RocketMQ 4.9's selector grammar reads them.

Keywords (NOT AND OR BETWEEN IN TRUE FALSE NULL IS) in any case; identifiers of ASCII letters,
digits, `_` and `$` not starting with a digit, kept as written (property names are case
sensitive); whole numbers `0` or `[1-9][0-9]*` with an optional `L`; decimal numbers with a
point or an exponent (`5.`, `.5`, `5.5E10`, `5E10`); strings in single quotes where `''` stands
for one quote; the operators `= <> > >= < <= ( ) , + -`. Blanks, `-- ... <newline>` and
`/* ... */` separate tokens. At each point the longest token wins and a keyword wins over an
identifier of the same text, so `notice` is an identifier and `NOT` a keyword.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Final


class SqlFilterError(ValueError):
    """An expression the selector grammar refuses; the message says what and where."""


class Kind(enum.Enum):
    KEYWORD = enum.auto()
    IDENT = enum.auto()
    INTEGER = enum.auto()
    DECIMAL = enum.auto()
    STRING = enum.auto()
    OPERATOR = enum.auto()
    END = enum.auto()


KEYWORDS: Final = frozenset(("NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"))


@dataclass(frozen=True, slots=True)
class Token:
    kind: Kind
    #: a keyword upper-cased, a string literal decoded, else the text as written
    text: str
    #: 1-based position of its first character in the expression
    column: int

    def describe(self) -> str:
        if self.kind is Kind.END:
            return "the end of the expression"
        if self.kind is Kind.STRING:
            return f"string '{self.text}'"
        return f"'{self.text}'"


_SKIP: Final = r"[ \t\n\r\f]+|--[^\n\r]*[\n\r]|/\*[^*]*\*+(?:[^/*][^*]*\*+)*/"
_EXPONENT: Final = r"[eE][+-]?[0-9]+"
_DECIMAL: Final = rf"[0-9]+\.[0-9]*(?:{_EXPONENT})?|\.[0-9]+(?:{_EXPONENT})?|[0-9]+{_EXPONENT}"
_PATTERN: Final = re.compile(
    rf"(?P<skip>{_SKIP})"
    rf"|(?P<decimal>{_DECIMAL})"
    r"|(?P<integer>0|[1-9][0-9]*[lL]?)"
    r"|(?P<string>'(?:''|[^'])*')"
    r"|(?P<ident>[A-Za-z_$][A-Za-z0-9_$]*)"
    r"|(?P<operator><>|<=|>=|[=<>(),+-])"
)


def tokenize(text: str) -> list[Token]:
    """The tokens of `text`, ending with an END token; SqlFilterError for a character no token
    can start with (an unclosed string or comment included)."""
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        match = _PATTERN.match(text, pos)
        if match is None:
            raise SqlFilterError(_lex_error(text, pos))
        group = match.lastgroup
        value = match.group()
        column = pos + 1
        pos = match.end()
        if group == "skip":
            continue
        if group == "ident":
            upper = value.upper()
            if upper in KEYWORDS:
                tokens.append(Token(Kind.KEYWORD, upper, column))
            else:
                tokens.append(Token(Kind.IDENT, value, column))
        elif group == "string":
            tokens.append(Token(Kind.STRING, value[1:-1].replace("''", "'"), column))
        elif group == "integer":
            tokens.append(Token(Kind.INTEGER, value, column))
        elif group == "decimal":
            tokens.append(Token(Kind.DECIMAL, value, column))
        else:
            tokens.append(Token(Kind.OPERATOR, value, column))
    tokens.append(Token(Kind.END, "", len(text) + 1))
    return tokens


def _lex_error(text: str, pos: int) -> str:
    char = text[pos]
    if char == "'":
        return f"unclosed string starting at column {pos + 1}"
    if text.startswith("/*", pos):
        return f"unclosed comment starting at column {pos + 1}"
    return f"unexpected character {char!r} at column {pos + 1}"
