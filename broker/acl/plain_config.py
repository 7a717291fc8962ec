"""The ACL file: RocketMQ's `plain_acl.yml` shape, parsed into immutable accounts.

```yaml
globalWhiteRemoteAddresses: ["10.10.103.*"]
accounts:
  - accessKey: RocketMQ          # longer than 6 characters, unique
    secretKey: "12345678"        # longer than 6 characters
    whiteRemoteAddress: ""       # a pattern (remote_address.py): requests from it skip checks
    admin: false
    defaultTopicPerm: DENY       # PUB, SUB, PUB|SUB, SUB|PUB or DENY; absent is DENY
    defaultGroupPerm: SUB
    topicPerms: ["topicA=DENY", "topicB=PUB|SUB"]
    groupPerms: ["groupA=DENY"]  # kept under the group's retry topic
```
Mirrors `PlainPermissionManager.buildPlainAccessResource` and `Permission.parseResourcePerms`,
except that a permission word that is not one of the five is an error here (upstream reads it
as DENY). Any problem raises `AclConfigError` naming the account by its access key, never the
secret. Reads one file, knows nothing of requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from broker.acl.permission import Permission, PermissionSyntaxError, parse_perm, retry_topic
from broker.acl.remote_address import AddressMatcher, AddressPatternError, parse_address_pattern

#: upstream refuses keys and secrets of 6 characters or fewer
MIN_KEY_LENGTH: Final = 7


class AclConfigError(ValueError):
    """The ACL file cannot be used; the message says where (never a secret)."""


@dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)
    white_remote_address: AddressMatcher
    admin: bool = False
    default_topic_perm: Permission = Permission.DENY
    default_group_perm: Permission = Permission.DENY
    #: topic -> permission; groups are under their retry topic (`%RETRY%group`)
    resource_perms: Mapping[str, Permission] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PlainAclConfig:
    global_white_remote_addresses: tuple[AddressMatcher, ...] = ()
    accounts: Mapping[str, Account] = field(default_factory=dict)


def load_plain_acl(path: Path) -> PlainAclConfig:
    """Read and parse the file; `AclConfigError` if it is unreadable or malformed."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AclConfigError(f"cannot read {path}: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AclConfigError(f"{path} is not valid YAML: {exc}") from None
    return parse_plain_acl(data if data is not None else {})


def parse_plain_acl(data: object) -> PlainAclConfig:
    """The configuration from the file's decoded YAML."""
    if not isinstance(data, dict):
        raise AclConfigError("the ACL file must hold a mapping")
    white = tuple(
        _pattern(p, "globalWhiteRemoteAddresses")
        for p in _list(data, "globalWhiteRemoteAddresses", "the file")
    )
    accounts: dict[str, Account] = {}
    for index, raw in enumerate(_list(data, "accounts", "the file")):
        account = _account(raw, index)
        if account.access_key in accounts:
            raise AclConfigError(f"accessKey {account.access_key!r} is listed twice")
        accounts[account.access_key] = account
    return PlainAclConfig(white, accounts)


def _account(raw: object, index: int) -> Account:
    if not isinstance(raw, dict):
        raise AclConfigError(f"accounts[{index}] is not a mapping")
    access_key = _text(raw.get("accessKey"))
    where = f"account {access_key!r}" if access_key else f"accounts[{index}]"
    secret_key = _text(raw.get("secretKey"))
    if len(access_key) < MIN_KEY_LENGTH or len(secret_key) < MIN_KEY_LENGTH:
        raise AclConfigError(f"{where}: accessKey and secretKey must be longer than 6 characters")
    perms: dict[str, Permission] = {}
    for entry in _list(raw, "groupPerms", where):
        group, perm = _resource_perm(entry, "groupPerms", where)
        perms[retry_topic(group)] = perm
    for entry in _list(raw, "topicPerms", where):
        topic, perm = _resource_perm(entry, "topicPerms", where)
        perms[topic] = perm
    return Account(
        access_key,
        secret_key,
        _pattern(raw.get("whiteRemoteAddress"), f"{where} whiteRemoteAddress"),
        _bool(raw.get("admin", False), f"{where} admin"),
        _perm(raw.get("defaultTopicPerm"), f"{where} defaultTopicPerm"),
        _perm(raw.get("defaultGroupPerm"), f"{where} defaultGroupPerm"),
        perms,
    )


def _text(value: object) -> str:
    # YAML reads an unquoted 12345678 as an int; upstream's loader turns it into text.
    if value is None or isinstance(value, bool):
        return ""
    return str(value).strip() if isinstance(value, str | int) else ""


def _list(data: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise AclConfigError(f"{where}: {key} must be a list")
    return value


def _pattern(value: object, where: str) -> AddressMatcher:
    if value is not None and not isinstance(value, str):
        raise AclConfigError(f"{where}: address pattern must be text, got {value!r}")
    try:
        return parse_address_pattern(value)
    except AddressPatternError as exc:
        raise AclConfigError(f"{where}: {exc}") from None


def _perm(value: object, where: str) -> Permission:
    if value is None or (isinstance(value, str) and not value.strip()):
        return Permission.DENY
    if not isinstance(value, str):
        raise AclConfigError(f"{where}: expected a permission, got {value!r}")
    try:
        return parse_perm(value, strict=True)
    except PermissionSyntaxError as exc:
        raise AclConfigError(f"{where}: {exc}") from None


def _resource_perm(entry: object, key: str, where: str) -> tuple[str, Permission]:
    text = entry if isinstance(entry, str) else ""
    name, sep, perm = text.partition("=")
    if not sep or not name.strip() or "=" in perm:
        raise AclConfigError(f"{where}: {key} entry {entry!r} is not NAME=PERM")
    return name.strip(), _perm(perm, f"{where} {key}")


def _bool(value: object, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in {"true", "false"}:
        return value.strip().lower() == "true"
    raise AclConfigError(f"{where}: expected true or false, got {value!r}")
