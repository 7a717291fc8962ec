"""Permissions of the plain ACL: the PUB/SUB/DENY bits, their text form and the check.

Mirrors RocketMQ 4.9's `acl/common/Permission.java` and `PlainAccessResource.java`: a group's
permission is kept under its retry topic (`%RETRY%group`), so one table holds both topics and
groups; a resource missing from an account's table falls back to its default topic or group
permission. Knows nothing of requests or files.
"""

from __future__ import annotations

import enum
from typing import Final

from protocol.codes import RequestCode

RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
#: message trace topic: a PUB on it skips the per-resource check (upstream's exception)
RMQ_SYS_TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"


class Permission(enum.IntFlag):
    """Permission bits, with upstream's values (`Permission.DENY` = 1, ANY, PUB, SUB)."""

    NONE = 0
    DENY = 1
    ANY = 1 << 1
    PUB = 1 << 2
    SUB = 1 << 3


_PERM_BY_TEXT: Final = {
    "PUB": Permission.PUB,
    "SUB": Permission.SUB,
    "PUB|SUB": Permission.PUB | Permission.SUB,
    "SUB|PUB": Permission.PUB | Permission.SUB,
    "DENY": Permission.DENY,
}

#: request codes only an admin account may send (upstream's `Permission.ADMIN_CODE`, plus
#: TRIGGER_DELETE_FILES: deleting stored messages is not for every producer;
#: INVOKE_BROKER_TO_RESET_OFFSET: moving a group's offsets makes it skip or re-read messages; and
#: the name-server role's codes that change routes, which a 4.9 name server takes from anyone).
#: The read-only admin codes (GET_ALL_TOPIC_CONFIG, GET_TOPIC_STATS_INFO, GET_BROKER_CONFIG,
#: runtime info, topic lists, GET_CONSUME_STATS, GET_ALL_SUBSCRIPTIONGROUP_CONFIG, the
#: connection lists, GET_CONSUMER_RUNNING_INFO ...) need a valid signature of any account, as in
#: 4.9.
ADMIN_CODES: Final = frozenset(
    {
        RequestCode.TRIGGER_DELETE_FILES,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER,
    }
)


class PermissionSyntaxError(ValueError):
    """A permission text that is none of PUB, SUB, PUB|SUB, SUB|PUB, DENY."""


def parse_perm(text: str | None, *, strict: bool = False) -> Permission:
    """`text` as permission bits; absent or unknown text is DENY (upstream), or raises if strict."""
    if text is None:
        return Permission.DENY
    perm = _PERM_BY_TEXT.get(text.strip())
    if perm is None:
        if strict:
            raise PermissionSyntaxError(f"unknown permission {text!r}")
        return Permission.DENY
    return perm


def check_permission(needed: Permission, owned: Permission) -> bool:
    """True when `owned` grants `needed`; any DENY bit in `owned` refuses everything."""
    if owned & Permission.DENY:
        return False
    if needed & Permission.ANY:
        return bool(owned & (Permission.PUB | Permission.SUB))
    return bool(needed & owned)


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def describe_resource(resource: str) -> str:
    """`topic:NAME` or `group:NAME`, as upstream's remarks name a resource."""
    if is_retry_topic(resource):
        return "group:" + resource[len(RETRY_GROUP_TOPIC_PREFIX) :]
    return "topic:" + resource
