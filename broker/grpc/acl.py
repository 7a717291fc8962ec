"""The access check of RocketMQ 5 calls, against the remoting ACL's accounts and rules.

When `acl_enable` is on, a 5.x client signs every call: metadata `x-mq-date-time` (the
client's clock, `20240101T120000Z`) and `authorization` =
`MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time, Signature=<hex>`, the
signature being HMAC-SHA1 of the date-time text under the account's secret key. The account
table, the global and per-account address white lists and the permission check are the ones of
`broker.acl` (the same file, reloaded on change): a call is UNAUTHORIZED without a valid
signature of a known account, FORBIDDEN when a resource it needs is not granted (a send needs PUB
on its topic; a heartbeat of a consumer group SUB on the group). Unknown keys and bad signatures
get the same answer and the same HMAC work. Refusals are logged by the validator's rate limit.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Final

import structlog

from broker.acl.permission import Permission, retry_topic
from broker.acl.resource import AccessResource
from broker.acl.validator import AccessDenied, AccessValidator, check_perm, shared_validator
from broker.config import BrokerConfig
from broker.grpc.methods import CallContext, Message
from broker.grpc.status import status

log = structlog.get_logger()

_AUTHORIZATION: Final = re.compile(
    r"MQv2-HMAC-SHA1\s+Credential=(?P<ak>[^,\s]*),\s*SignedHeaders=(?P<headers>[^,\s]*),"
    r"\s*Signature=(?P<sig>[0-9A-Fa-f]*)\s*"
)
_DUMMY_SECRET: Final = b"\x00unknown-access-key"
_KEY_ECHO: Final = 64


def signature(secret: str | bytes, date_time: str) -> str:
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, date_time.encode(), hashlib.sha1).hexdigest()


def topic_needs(topic: str, perm: Permission) -> dict[str, Permission]:
    return {topic: perm} if topic else {}


def group_needs(group: str, perm: Permission) -> dict[str, Permission]:
    return {retry_topic(group): perm} if group else {}


class GrpcAccess:
    """The check every call of the service passes when ACL is on (a no-op when it is off)."""

    def __init__(self, config: BrokerConfig, validator: AccessValidator | None = None) -> None:
        self.validator = validator
        if validator is None and config.acl_enable:
            self.validator = shared_validator(config.acl_file)

    def check(
        self, context: CallContext, rpc: str, needed: Mapping[str, Permission]
    ) -> Message | None:
        """The refusal `Status` for this call, or None when it may proceed."""
        validator = self.validator
        if validator is None:
            return None
        validator.reload_if_changed()
        denied, code = self._decide(validator, context, needed)
        if denied is None:
            return None
        log.warning(
            "grpc_acl_denied",
            rpc=rpc,
            reason=denied.reason,
            access_key=denied.access_key,
            peer=context.peer,
        )
        return status(code, denied.remark)

    def _decide(
        self, validator: AccessValidator, context: CallContext, needed: Mapping[str, Permission]
    ) -> tuple[AccessDenied | None, str]:
        rules = validator.rules
        ip = context.peer.rpartition(":")[0].strip("[]")
        if any(white.match(ip) for white in rules.global_white_remote_addresses):
            return None, "OK"
        found = _AUTHORIZATION.fullmatch(context.metadata.get("authorization", ""))
        date_time = context.metadata.get("x-mq-date-time", "")
        if found is None or not found["ak"] or not date_time:
            return AccessDenied("no_access_key", "the call is not signed", None), "UNAUTHORIZED"
        key = found["ak"]
        echo = key if len(key) <= _KEY_ECHO else key[:_KEY_ECHO] + "..."
        account = rules.accounts.get(key)
        if account is not None and account.white_remote_address.match(ip):
            return None, "OK"
        secret: str | bytes = _DUMMY_SECRET if account is None else account.secret_key
        expected = signature(secret, date_time)
        if account is None or not hmac.compare_digest(expected, found["sig"].lower()):
            remark = f"Check signature failed for accessKey={echo}"
            return AccessDenied("bad_signature", remark, echo), "UNAUTHORIZED"
        denied = check_perm(AccessResource(0, key, found["sig"], dict(needed)), account)
        return denied, "FORBIDDEN"
