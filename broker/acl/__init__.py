"""RocketMQ's plain ACL: signed requests, per-topic and per-group permissions, address allow-lists.

`protocol.acl_signing` (what is signed and how, shared with the client), `permission`
(PUB/SUB/DENY), `remote_address` (allow-list patterns), `plain_config` (the `plain_acl.yml`
file), `resource` (what a request needs) and `validator` (the decision, file reloads, the
refusal log). The connection calls `AccessValidator.check` before dispatching a request.
"""

from broker.acl.validator import AccessDenied, AccessValidator, shared_validator
from protocol.acl_signing import SessionCredentials, sign_request

__all__ = [
    "AccessDenied",
    "AccessValidator",
    "SessionCredentials",
    "shared_validator",
    "sign_request",
]
