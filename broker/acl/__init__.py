"""RocketMQ's plain ACL: signed requests, per-topic and per-group permissions, address allow-lists.

`signing` (what is signed and how; the client side), `permission` (PUB/SUB/DENY),
`remote_address` (allow-list patterns), `plain_config` (the `plain_acl.yml` file), `resource`
(what a request needs) and `validator` (the decision, file reloads, the refusal log).
The connection calls `AccessValidator.check` before dispatching a request.
"""

from broker.acl.signing import SessionCredentials, sign_request
from broker.acl.validator import AccessDenied, AccessValidator, shared_validator

__all__ = [
    "AccessDenied",
    "AccessValidator",
    "SessionCredentials",
    "shared_validator",
    "sign_request",
]
