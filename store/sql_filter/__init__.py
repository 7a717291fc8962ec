"""SQL92 message selectors, as RocketMQ 4.9 evaluates them on the broker (`enablePropertyFilter`).

`compile_sql` turns a selector such as `a > 5 AND region = 'eu'` into a `SqlExpression`
(SqlFilterError when it is refused, with a message for the client); its `matches` says whether
a message with the given properties (user ones and system ones such as TAGS and KEYS) is
selected, and never raises. The grammar and refusals are in `parser`, the semantics in
`evaluate`. Compiled expressions are cached, as 4.9 caches them by their text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from store.sql_filter.evaluate import matches
from store.sql_filter.lexer import SqlFilterError
from store.sql_filter.nodes import Node
from store.sql_filter.parser import MAX_DEPTH, parse

__all__ = ["MAX_DEPTH", "MAX_SQL_LENGTH", "SqlExpression", "SqlFilterError", "compile_sql"]

#: characters of an expression at most: its evaluation runs for every message a read looks at
MAX_SQL_LENGTH: Final = 4096


@dataclass(frozen=True, slots=True)
class SqlExpression:
    text: str
    root: Node

    def matches(self, properties: Mapping[str, str]) -> bool:
        return matches(self.root, properties)


def compile_sql(text: str | None) -> SqlExpression:
    """The compiled selector `text`; SqlFilterError says why it is refused."""
    if text is None or not text.strip():
        raise SqlFilterError("the SQL92 expression is empty")
    if len(text) > MAX_SQL_LENGTH:
        raise SqlFilterError(
            f"the SQL92 expression is {len(text)} characters long, more than {MAX_SQL_LENGTH}"
        )
    return _compiled(text)


@lru_cache(maxsize=256)
def _compiled(text: str) -> SqlExpression:
    return SqlExpression(text, parse(text))
