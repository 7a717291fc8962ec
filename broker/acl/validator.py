"""The broker's access check: one request and the peer's address in, a refusal or nothing out.

`AccessValidator` holds the rules of one ACL file and decides as RocketMQ 4.9's
`PlainPermissionManager.validate`: a globally white-listed address passes; otherwise the request
needs an AccessKey of a known account; an address on that account's white list passes; otherwise
the signature must match (constant-time compare), then every needed resource must be granted
(admin-only codes need an admin account; a PUB on the trace topic skips the resource check).

A refusal is a NO_PERMISSION response with upstream's wording. An unknown access key and a bad
signature get the same remark (and the same HMAC work), so a peer cannot learn which keys
exist. Refusals are logged at most once per `log_interval_s` per (access key, address), with
the count suppressed in between; secrets never reach logs or remarks.

The file is re-read when its mtime, size or inode changes, checked at most every
`reload_interval_s` on access. A file that does not parse keeps the rules in force (none, if
it never parsed: everything but a white-listed address is refused) and is logged once per version.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog

from broker.acl.permission import (
    ADMIN_CODES,
    RMQ_SYS_TRACE_TOPIC,
    Permission,
    check_permission,
    describe_resource,
    is_retry_topic,
)
from broker.acl.plain_config import Account, AclConfigError, PlainAclConfig, load_plain_acl
from broker.acl.resource import (
    NAMESRV_LOOKUP_CODES,
    AccessRequestError,
    AccessResource,
    parse_access_resource,
)
from protocol.acl_signing import request_signature, signature_matches
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand

log = structlog.get_logger()

RELOAD_INTERVAL_S: Final = 2.0
LOG_INTERVAL_S: Final = 60.0
#: access keys longer than this are cut in remarks and logs (they come from the peer)
MAX_KEY_ECHO: Final = 64
_MAX_LOG_KEYS: Final = 4096
#: HMAC key for unknown access keys: the same work as a real check, never a match
_DUMMY_SECRET: Final = "\x00unknown-access-key"


@dataclass(frozen=True, slots=True)
class AccessDenied:
    """Why a request was refused: `reason` for logs, `remark` for the peer."""

    reason: str
    remark: str
    access_key: str | None
    code: int = ResponseCode.NO_PERMISSION


def _echo(access_key: str | None) -> str:
    text = "" if access_key is None else access_key
    return text if len(text) <= MAX_KEY_ECHO else text[:MAX_KEY_ECHO] + "..."


def _denied(reason: str, remark: str, access_key: str | None) -> AccessDenied:
    return AccessDenied(reason, remark, None if access_key is None else _echo(access_key))


def decide(rules: PlainAclConfig, request: RemotingCommand, remote_ip: str) -> AccessDenied | None:
    """The decision for one request from `remote_ip`; None when it may proceed."""
    if any(white.match(remote_ip) for white in rules.global_white_remote_addresses):
        return None
    try:
        resource = parse_access_resource(request)
    except AccessRequestError as exc:
        return _denied("bad_request", str(exc), request.ext_fields.get("AccessKey"))
    key = resource.access_key
    if key is None:
        return _denied("no_access_key", "No accessKey is configured", None)
    account = rules.accounts.get(key)
    if account is not None and account.white_remote_address.match(remote_ip):
        return None
    secret = _DUMMY_SECRET if account is None else account.secret_key
    expected = request_signature(request.ext_fields, request.body, secret)
    if account is None or not signature_matches(expected, resource.signature):
        remark = f"Check signature failed for accessKey={_echo(key)}"
        return _denied("bad_signature", remark, key)
    if resource.needed.get(RMQ_SYS_TRACE_TOPIC) == Permission.PUB:
        return None
    return check_perm(resource, account)


def check_perm(resource: AccessResource, account: Account) -> AccessDenied | None:
    """Upstream's `checkPerm`: the admin codes, then each needed resource against the account."""
    key = account.access_key
    if resource.request_code in ADMIN_CODES and not account.admin:
        code = resource.request_code
        remark = f"Need admin permission for request code={code}, but accessKey={key} is not"
        return _denied("admin_required", remark, key)
    if not resource.needed or (not account.resource_perms and account.admin):
        return None
    for name, needed in resource.needed.items():
        owned = account.resource_perms.get(name)
        if owned is None:
            group = is_retry_topic(name)
            owned = account.default_group_perm if group else account.default_topic_perm
        if not check_permission(needed, owned):
            remark = f"No default permission for {describe_resource(name)}"
            return _denied("no_permission", remark, key)
    return None


class AccessValidator:
    """The rules of one ACL file, reloaded on change, and the refusal log's rate limit."""

    def __init__(
        self,
        path: Path,
        *,
        reload_interval_s: float = RELOAD_INTERVAL_S,
        log_interval_s: float = LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.reload_interval_s = reload_interval_s
        self.log_interval_s = log_interval_s
        self.rules = PlainAclConfig()
        self.version: tuple[int, int, int] | None = None
        self._clock = clock
        self._checked_at = float("-inf")
        self._bad_version: tuple[int, int, int] | None = None
        self._logged: dict[tuple[str, str], tuple[float, int]] = {}
        #: why the file last failed to load (None once it loads)
        self.error: str | None = None
        self.reload_if_changed(force=True)

    def check(self, request: RemotingCommand, remote: tuple[str, int]) -> RemotingCommand | None:
        """The refusal to send for `request`, or None to process it."""
        if request.code in NAMESRV_LOOKUP_CODES:
            return None
        self.reload_if_changed()
        denied = decide(self.rules, request, remote[0])
        if denied is None:
            return None
        self._log_denied(denied, request.code, remote[0])
        return request.make_response(denied.code, denied.remark)

    def reload_if_changed(self, *, force: bool = False) -> bool:
        """Re-read the file if it changed; True when new rules are in force.

        A stat every `reload_interval_s` at most: cheap enough to run on the event loop.
        """
        now = self._clock()
        if not force and now - self._checked_at < self.reload_interval_s:
            return False
        self._checked_at = now
        try:
            st = os.stat(self.path)
        except OSError as exc:
            self._report_bad((0, 0, 0), f"cannot read {self.path}: {exc.strerror}")
            return False
        version = (st.st_mtime_ns, st.st_size, st.st_ino)
        if version in (self.version, self._bad_version):
            return False
        try:
            rules = load_plain_acl(self.path)
        except AclConfigError as exc:
            self._report_bad(version, str(exc))
            return False
        self.rules, self.version, self._bad_version, self.error = rules, version, None, None
        log.info("acl_loaded", path=str(self.path), accounts=len(rules.accounts))
        return True

    def _report_bad(self, version: tuple[int, int, int], error: str) -> None:
        self.error = error
        if version != self._bad_version:
            self._bad_version = version
            kept = "previous" if self.version is not None else "none"
            log.error("acl_file_invalid", path=str(self.path), error=error, rules_kept=kept)

    def _log_denied(self, denied: AccessDenied, code: int, ip: str) -> None:
        now = self._clock()
        key = (denied.access_key or "", ip)
        last, suppressed = self._logged.get(key, (float("-inf"), 0))
        if now - last < self.log_interval_s:
            self._logged[key] = (last, suppressed + 1)
            return
        if len(self._logged) >= _MAX_LOG_KEYS:
            self._logged.clear()  # a flood of made-up keys must not grow this without bound
        self._logged[key] = (now, 0)
        log.warning(
            "acl_denied",
            reason=denied.reason,
            access_key=denied.access_key,
            remote_ip=ip,
            request_code=RequestCode.name_of(code),
            suppressed=suppressed,
        )


_SHARED: dict[Path, AccessValidator] = {}


def shared_validator(path: str | os.PathLike[str]) -> AccessValidator:
    """The process-wide validator of one ACL file: every listener and connection shares it."""
    resolved = Path(path).resolve()
    validator = _SHARED.get(resolved)
    if validator is None:
        validator = _SHARED[resolved] = AccessValidator(resolved)
    return validator
