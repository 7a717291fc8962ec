"""The SQL92 selector against hand-worked answers from 4.9's semantics: each operator, unknown
(missing) properties, strings read as numbers, precedence, quotes, and the refusals."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.sql_filter import MAX_DEPTH, MAX_SQL_LENGTH, SqlFilterError, compile_sql

# (expression, properties, selected)
CASES: list[tuple[str, dict[str, str], bool]] = [
    # = and <> on strings, case-sensitive values and names
    ("region = 'eu'", {"region": "eu"}, True),
    ("region = 'eu'", {"region": "EU"}, False),
    ("Region = 'eu'", {"region": "eu"}, False),
    ("region <> 'eu'", {"region": "us"}, True),
    ("region <> 'eu'", {"region": "eu"}, False),
    ("region <> 'eu'", {}, False),  # unknown, NOT unknown: not selected
    # numbers: the property is read as the literal's type
    ("a > 5", {"a": "10"}, True),
    ("a > 5", {"a": "5"}, False),
    ("a >= 5", {"a": "5"}, True),
    ("a < 5", {"a": "-3"}, True),
    ("a <= 5", {"a": "+5"}, True),
    ("a = 5", {"a": "05"}, True),
    ("a > 5", {"a": "5.5"}, False),  # an int literal reads the value as an int: it is not one
    ("a > 5", {"a": "3000000000"}, False),  # nor is a value past the int range
    ("a > 5L", {"a": "3000000000"}, False),  # 5L fits an int, so 4.9 keeps it an int
    ("a > 3000000000", {"a": "5"}, False),
    ("a > 3000000000", {"a": "3000000001"}, True),  # the literal itself is a long
    ("a > 5.0", {"a": "5.5"}, True),
    ("a > 5.0", {"a": " 5.5 "}, True),  # Double.valueOf trims
    ("a > 5.0", {"a": "6e0"}, True),
    ("a = 5.0", {"a": "5"}, True),
    ("a < 1E3", {"a": "999.9"}, True),
    ("a > .5", {"a": "0.75"}, True),
    ("a > 5", {"a": "abc"}, False),
    ("a > 5 OR b = 'x'", {"a": "abc", "b": "x"}, False),  # a failed reading ends it all
    ("b = 'x' OR a > 5", {"a": "abc", "b": "x"}, True),  # ... unless OR was decided before
    ("a > -5", {"a": "-4"}, True),
    ("a > - -5", {"a": "6"}, True),
    ("-a < 5", {"a": "1"}, False),  # the negation of a string is unknown
    ("a > +5", {"a": "6"}, True),
    # two properties: both read as doubles by > >= < <=, compared as text by =
    ("a > b", {"a": "10", "b": "9.5"}, True),
    ("a > b", {"a": "x", "b": "1"}, False),
    ("a = b", {"a": "1.0", "b": "1"}, False),
    ("a = b", {"a": "x", "b": "x"}, True),
    # unknown
    ("a > 5", {}, False),
    ("NOT (a > 5)", {}, False),
    ("a IS NULL", {}, True),
    ("a IS NULL", {"a": "1"}, False),
    ("a IS NOT NULL", {"a": ""}, True),
    ("a is not null", {}, False),
    ("a = b", {}, True),  # both missing: equal, as 4.9 says
    ("a = b", {"a": "1"}, False),  # the right one missing: FALSE, so <> is TRUE
    ("a <> b", {"a": "1"}, True),
    ("a = b", {"b": "1"}, False),  # the left one missing: unknown
    ("a <> b", {"b": "1"}, False),
    ("a > 5 OR b = 'x'", {"b": "x"}, True),
    ("a > 5 AND b = 'x'", {"b": "x"}, False),
    ("NOT (a > 5 AND b = 'y')", {"b": "x"}, True),  # unknown AND FALSE is FALSE
    ("NOT (a > 5 OR b = 'y')", {"b": "x"}, False),  # unknown OR FALSE is unknown
    # BETWEEN, IN
    ("a BETWEEN 1 AND 10", {"a": "1"}, True),
    ("a BETWEEN 1 AND 10", {"a": "10"}, True),
    ("a BETWEEN 1 AND 10", {"a": "11"}, False),
    ("a NOT BETWEEN 1 AND 10", {"a": "11"}, True),
    ("a NOT BETWEEN 1 AND 10", {"a": "5"}, False),
    ("a NOT BETWEEN 1 AND 10", {}, False),
    ("a BETWEEN -5 AND -1", {"a": "-3"}, True),
    ("a NOT BETWEEN 10 AND 1", {"a": "5"}, True),  # 4.9 checks the bounds of BETWEEN only
    ("region IN ('eu', 'us')", {"region": "us"}, True),
    ("region IN ('eu', 'us')", {"region": "asia"}, False),
    ("region NOT IN ('eu', 'us')", {"region": "asia"}, True),
    ("region NOT IN ('eu', 'us')", {}, False),
    ("a IN ('1')", {"a": "01"}, False),  # IN compares text
    # booleans
    ("TRUE", {}, True),
    ("FALSE", {}, False),
    ("NOT FALSE", {}, True),
    ("flag = TRUE", {"flag": "true"}, True),
    ("flag = TRUE", {"flag": "TRUE"}, True),
    ("flag = TRUE", {"flag": "yes"}, False),
    ("flag = FALSE", {"flag": "yes"}, True),  # anything but 'true' reads as false
    ("flag", {"flag": "true"}, False),  # a bare property is a string, not TRUE
    ("NOT flag", {"flag": "true"}, True),
    ("NOT flag", {}, False),
    ("TRUE = flag", {"flag": "true"}, False),  # 4.9 fails to compare a boolean with a string
    ("(a > 5) = TRUE", {"a": "6"}, True),
    ("1 = TRUE", {}, False),
    # precedence: AND before OR, comparisons before =, NOT binds to its operand
    ("a = 1 OR a = 2 AND b = 3", {"a": "1"}, True),
    ("(a = 1 OR a = 2) AND b = 3", {"a": "1"}, False),
    ("NOT a = 1", {"a": "1"}, False),  # (NOT a) = 1: TRUE = 1 is FALSE
    ("NOT (a = 1)", {"a": "2"}, True),
    ("a > 1 = TRUE", {"a": "2"}, True),
    # quotes, keywords, comments, identifiers
    ("name = 'O''Brien'", {"name": "O'Brien"}, True),
    ("name = ''''", {"name": "'"}, True),
    ("name = ''", {"name": ""}, True),
    ("name = 'a b'", {"name": "a b"}, True),
    ("name = 'ünï'", {"name": "ünï"}, True),
    ("a > 5 and B = 'x' Or c iS nUlL", {"a": "1"}, True),
    ("$a_1 = 'x'", {"$a_1": "x"}, True),
    ("a = 1 -- the first\n", {"a": "1"}, True),
    ("a /* one */ = 1", {"a": "1"}, True),
    ("notice = 'x'", {"notice": "x"}, True),
    # system properties: TAGS and KEYS as the message stores them
    ("TAGS = 'TagA'", {"TAGS": "TagA"}, True),
    ("TAGS IN ('TagA', 'TagB') AND KEYS IS NOT NULL", {"TAGS": "TagB", "KEYS": "k1"}, True),
]


@pytest.mark.parametrize(("expression", "properties", "selected"), CASES)
def test_evaluation(expression: str, properties: dict[str, str], selected: bool) -> None:
    assert compile_sql(expression).matches(properties) is selected


REFUSED: list[tuple[str, str]] = [
    ("", "empty"),
    ("   ", "empty"),
    ("a > 'x'", "cannot be compared"),
    ("a > TRUE", "cannot be compared"),
    ("a > NULL", "cannot be compared"),
    ("(a = 1) > 2", "cannot be compared"),
    ("a = NULL", "IS NULL"),
    ("NULL = a", "IS NULL"),
    ("TRUE = 1", "cannot be compared"),
    ("5", "boolean"),
    ("'x'", "boolean"),
    ("a > 5 AND 3", "boolean"),
    ("NOT 5", "boolean"),
    ("-a", "boolean"),
    ("5 IN ('a')", "property"),
    ("a IN (1)", "strings only"),
    ("a IN ()", "strings only"),
    ("a BETWEEN 10 AND 1", "above"),
    ("a BETWEEN 'a' AND 'b'", "cannot be compared"),
    ("a BETWEEN NULL AND 1", "NULL"),
    ("a > 0.0", "double range"),
    ("a > 1E400", "double range"),
    ("a > 9223372036854775808", "exceeds a long"),
    ("a > 00", "unexpected"),
    ("a = 'x", "unclosed string"),
    ("a = 1 /* open", "unclosed comment"),
    ("a != 1", "unexpected character '!'"),
    ("a > 5 b = 1", "unexpected"),
    ("(a > 5", r"expected '\)'"),
    ("a IS 5", "expected 'NULL'"),
    ("a.b = 1", "unexpected character '.'"),
    ("a > 5 AND", "unexpected"),
    ("AND = 1", "unexpected"),
    ("a LIKE 'x%'", "unexpected"),
    ("a CONTAINS 'x'", "unexpected"),
]


@pytest.mark.parametrize(("expression", "reason"), REFUSED)
def test_refusals(expression: str, reason: str) -> None:
    with pytest.raises(SqlFilterError, match=reason):
        compile_sql(expression)


def test_nesting_and_length_limits() -> None:
    fits = "(" * (MAX_DEPTH - 2) + "a = 1" + ")" * (MAX_DEPTH - 2)
    assert compile_sql(fits).matches({"a": "1"})
    for deep in (
        "(" * (MAX_DEPTH + 1) + "a = 1" + ")" * (MAX_DEPTH + 1),
        "NOT " * (MAX_DEPTH + 1) + "a = 1",
        "a > " + "-" * (MAX_DEPTH + 1) + "1",
        "a = 1" + " = TRUE" * (MAX_DEPTH + 1),
        "(" * 4000 + "a",  # never reaches Python's recursion limit
    ):
        with pytest.raises(SqlFilterError, match="nested deeper"):
            compile_sql(deep)
    # a long OR chain is wide, not deep
    chain = " OR ".join(f"a = {i}" for i in range(300))
    assert compile_sql(chain).matches({"a": "299"})
    with pytest.raises(SqlFilterError, match="more than"):
        compile_sql("a = 1 OR " * (MAX_SQL_LENGTH // 9) + "a = 2")


_texts = st.text(alphabet=string.printable + "éü'", max_size=12)


@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), _texts, max_size=3))
def test_evaluation_never_raises(properties: dict[str, str]) -> None:
    for expression in (
        "a > 5 OR b < 2.5 OR c = 7",
        "a BETWEEN 1L AND 2 AND b IN ('x', 'y')",
        "a > b OR a = TRUE OR -a < 1",
        "NOT (c IS NULL) AND c NOT BETWEEN .5 AND 1E3",
    ):
        result = compile_sql(expression).matches(properties)
        assert result in (True, False)


@given(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**31), 2**31 - 1))
def test_int_comparisons_agree_with_python(value: int, literal: int) -> None:
    text = f"a > {literal}" if literal >= 0 else f"a > -{-literal}"
    assert compile_sql(text).matches({"a": str(value)}) is (value > literal)


@given(st.text(max_size=40))
def test_any_text_compiles_or_is_refused(text: str) -> None:
    try:
        expression = compile_sql(text)
    except SqlFilterError as exc:
        assert str(exc)
    else:
        assert expression.matches({}) in (True, False)


_TOKENS = [
    "a", "b", "(", ")", "NOT", "AND", "OR", "=", "<>", ">", ">=", "<", "<=", "5", "3000000000",
    "1.5", "'x'", "'5'", "IS", "NULL", "BETWEEN", "IN", ",", "-", "+", "TRUE", "FALSE",
]  # fmt: skip


@given(
    st.lists(st.sampled_from(_TOKENS), min_size=1, max_size=14),
    st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from(["5", "x", "1.5", "true", "-7"])),
)
def test_token_soup_compiles_or_is_refused_and_never_raises(
    tokens: list[str], properties: dict[str, str]
) -> None:
    try:
        expression = compile_sql(" ".join(tokens))
    except SqlFilterError as exc:
        assert str(exc)
    else:
        assert expression.matches(properties) in (True, False)
