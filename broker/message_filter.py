"""The filter of a subscription as the consumer calls carry it: an expression and its type.

`TAG` (or no type) is a tag list, `SQL92` a selector over message properties (`store.sql_filter`),
served to pulls only with `enable_property_filter`, as 4.9's `enablePropertyFilter`; 5.x's pops
(remoting POP_MESSAGE, gRPC receives) serve it whatever the switch says. Pulls, heartbeat
subscriptions, pops and gRPC receives build their filter here, so they refuse alike: a bad
expression or an unknown type with SUBSCRIPTION_PARSE_FAILED (5.x clients see
ILLEGAL_FILTER_EXPRESSION), SQL92 on a broker without property filtering with SYSTEM_ERROR and
4.9's remark. 4.9 checks the expression first, then the switch; so do these. A remoting
refusal is logged once, as every refused request is (`broker.refusals`).
"""

from __future__ import annotations

from typing import Final

from protocol.codes import ResponseCode
from protocol.errors import HeaderFieldError
from store.get_message import TagFilter
from store.sql_filter import SqlExpression, SqlFilterError, compile_sql

TAG: Final = "TAG"
SQL92: Final = "SQL92"


def is_tag_type(kind: str | None) -> bool:
    """4.9's ExpressionType.isTagType: no type, "" and TAG."""
    return kind in (None, "", TAG)


def not_served_remark(kind: str | None) -> str:
    return f"The broker does not support consumer to filter message by {kind}"


def build_filter(
    expression: str | None,
    kind: str | None,
    *,
    property_filter: bool,
    field: str,
) -> TagFilter:
    """The filter of `expression` of type `kind`; `HeaderFieldError` naming `field` when it is
    refused (`property_filter`: the broker's enable_property_filter)."""
    if is_tag_type(kind):
        return TagFilter.parse(expression)
    compiled = check_expression(expression, kind, field=field)
    if not property_filter:
        raise HeaderFieldError(field, not_served_remark(kind), ResponseCode.SYSTEM_ERROR)
    return TagFilter(sql=compiled)


def check_expression(expression: str | None, kind: str | None, *, field: str) -> SqlExpression:
    """`expression` compiled as a selector of type `kind` (SQL92, the one 4.9 knows besides
    TAG); HeaderFieldError with SUBSCRIPTION_PARSE_FAILED and the reason when it does not."""
    if kind != SQL92:
        reason = f"expression type {str(kind)[:32]!r} is not supported, only TAG and SQL92"
    else:
        try:
            return compile_sql(expression)
        except SqlFilterError as exc:
            reason = f"parse the consumer's subscription failed: {exc}"
    raise HeaderFieldError(field, reason, ResponseCode.SUBSCRIPTION_PARSE_FAILED)
