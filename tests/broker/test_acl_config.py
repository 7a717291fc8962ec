"""The ACL file and address patterns: parsing, refusals of bad files, reloads without a restart."""

from __future__ import annotations

import os
import pathlib

import pytest
from structlog.testing import capture_logs

from broker.acl.permission import Permission, check_permission, parse_perm
from broker.acl.plain_config import AclConfigError, parse_plain_acl
from broker.acl.remote_address import AddressPatternError, parse_address_pattern
from broker.acl.validator import AccessValidator

GOOD = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
    groupPerms:
      - groupA=DENY
  - accessKey: rocketmq2
    secretKey: "87654321"
    whiteRemoteAddress: 192.168.1.*
    admin: true
"""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def write(path: pathlib.Path, text: str, mtime_ns: int) -> None:
    path.write_text(text)
    os.utime(path, ns=(mtime_ns, mtime_ns))  # distinct mtimes even within one clock tick


@pytest.mark.parametrize(
    ("text", "perm"),
    [
        ("PUB", Permission.PUB),
        ("SUB", Permission.SUB),
        (" PUB|SUB ", Permission.PUB | Permission.SUB),
        ("SUB|PUB", Permission.PUB | Permission.SUB),
        ("DENY", Permission.DENY),
        ("pub", Permission.DENY),
        (None, Permission.DENY),
    ],
)
def test_permission_words_parse_as_upstream(text: str | None, perm: Permission) -> None:
    assert parse_perm(text) == perm


def test_check_permission_deny_wins_and_any_needs_pub_or_sub() -> None:
    assert check_permission(Permission.PUB, Permission.PUB | Permission.SUB)
    assert not check_permission(Permission.PUB, Permission.SUB)
    assert not check_permission(Permission.SUB, Permission.DENY | Permission.SUB)
    assert check_permission(Permission.ANY, Permission.SUB)
    assert not check_permission(Permission.ANY, Permission.NONE)


def test_a_good_file_parses_into_accounts() -> None:
    import yaml

    config = parse_plain_acl(yaml.safe_load(GOOD))
    assert config.global_white_remote_addresses[0].match("10.10.103.7")
    first = config.accounts["RocketMQ"]
    assert first.secret_key == "12345678"  # an unquoted number is text, as upstream reads it
    assert first.default_topic_perm == Permission.DENY
    assert first.default_group_perm == Permission.SUB
    assert first.resource_perms == {
        "topicA": Permission.DENY,
        "topicB": Permission.PUB | Permission.SUB,
        "%RETRY%groupA": Permission.DENY,
    }
    assert not first.white_remote_address.match("127.0.0.1")
    second = config.accounts["rocketmq2"]
    assert second.admin and second.white_remote_address.match("192.168.1.200")
    assert "87654321" not in repr(config)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ([], "mapping"),
        ({"accounts": {"a": 1}}, "must be a list"),
        ({"accounts": [{"accessKey": "short", "secretKey": "12345678"}]}, "longer than 6"),
        ({"accounts": [{"accessKey": "RocketMQ", "secretKey": "123456"}]}, "longer than 6"),
        (
            {"accounts": [{"accessKey": "RocketMQ", "secretKey": "12345678", "admin": "yes"}]},
            "admin",
        ),
        (
            {"accounts": [{"accessKey": "RocketMQ", "secretKey": "1234567", "topicPerms": ["t"]}]},
            "NAME=PERM",
        ),
        (
            {
                "accounts": [
                    {"accessKey": "RocketMQ", "secretKey": "1234567", "topicPerms": ["t=ALL"]}
                ]
            },
            "unknown permission",
        ),
        (
            {"accounts": [{"accessKey": "RocketMQ", "secretKey": "1234567"}] * 2},
            "listed twice",
        ),
        ({"globalWhiteRemoteAddresses": ["10.0.0.300"]}, "not an IP address"),
        ({"globalWhiteRemoteAddresses": ["not-an-ip"]}, "expected 4 parts"),
    ],
)
def test_bad_files_are_refused_without_revealing_secrets(data: object, fragment: str) -> None:
    with pytest.raises(AclConfigError, match=fragment) as caught:
        parse_plain_acl(data)
    assert "12345678" not in str(caught.value) and "1234567" not in str(caught.value)


@pytest.mark.parametrize(
    ("pattern", "inside", "outside"),
    [
        ("*", ["1.2.3.4", "::1"], []),
        ("", [], ["1.2.3.4"]),
        ("10.0.0.1", ["10.0.0.1", "::ffff:10.0.0.1"], ["10.0.0.2"]),
        ("10.0.0.1,10.0.0.3", ["10.0.0.3"], ["10.0.0.2"]),
        ("192.168.1.{1,2,3}", ["192.168.1.2"], ["192.168.1.4", "192.168.2.2"]),
        ("192.168.*.*", ["192.168.0.1", "192.168.255.9"], ["192.169.0.1"]),
        ("192.168.1.10-20", ["192.168.1.10", "192.168.1.20"], ["192.168.1.9", "192.168.1.21"]),
        ("192.168.1-2.*", ["192.168.2.77"], ["192.168.3.1"]),
        ("::1", ["0:0::1"], ["::2", "127.0.0.1"]),
        ("2001:db8::1-ff", ["2001:db8::ff"], ["2001:db8::100", "2001:db9::1"]),
        ("2001:db8::{a,b}", ["2001:db8::b"], ["2001:db8::c"]),
    ],
)
def test_address_patterns(pattern: str, inside: list[str], outside: list[str]) -> None:
    matcher = parse_address_pattern(pattern)
    assert all(matcher.match(ip) for ip in inside)
    assert not any(matcher.match(ip) for ip in outside)
    assert not matcher.match("garbage") or pattern == "*"


@pytest.mark.parametrize(
    "pattern", ["1.2.3", "1.2.3.4-1", "1.2.x.*", "a,b", "1.2.3.{}", "1.2.3.4.5"]
)
def test_bad_address_patterns_raise(pattern: str) -> None:
    with pytest.raises(AddressPatternError):
        parse_address_pattern(pattern)


def test_file_changes_are_picked_up_and_a_bad_file_keeps_the_old_rules(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "plain_acl.yml"
    write(path, GOOD, 1_000_000_000)
    clock = Clock()
    with capture_logs() as logs:
        validator = AccessValidator(path, reload_interval_s=5.0, clock=clock)
        assert set(validator.rules.accounts) == {"RocketMQ", "rocketmq2"}

        write(path, "accounts:\n  - accessKey: NewAccount\n    secretKey: 7654321\n", 2_000_000_000)
        clock.now = 4.9
        assert not validator.reload_if_changed()  # not yet due: no stat
        clock.now = 5.0
        assert validator.reload_if_changed()
        assert set(validator.rules.accounts) == {"NewAccount"}

        write(path, "accounts: [ {accessKey: x", 3_000_000_000)
        for step in range(3):  # a bad file is reported once, however often it is checked
            clock.now = 10.0 + 5 * step
            assert not validator.reload_if_changed()
        assert set(validator.rules.accounts) == {"NewAccount"}

        write(path, GOOD, 4_000_000_000)
        clock.now = 30.0
        assert validator.reload_if_changed()
    events = [e["event"] for e in logs]
    assert events == ["acl_loaded", "acl_loaded", "acl_file_invalid", "acl_loaded"]
    bad = next(e for e in logs if e["event"] == "acl_file_invalid")
    assert bad["rules_kept"] == "previous"
    assert "12345678" not in str(logs) and "7654321" not in str(logs)


def test_a_missing_file_means_no_accounts_until_it_appears(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "later.yml"
    clock = Clock()
    with capture_logs() as logs:
        validator = AccessValidator(path, reload_interval_s=1.0, clock=clock)
    assert validator.rules.accounts == {}
    assert [e["event"] for e in logs] == ["acl_file_invalid"]
    assert logs[0]["rules_kept"] == "none"
    write(path, GOOD, 5_000_000_000)
    clock.now = 1.0
    assert validator.reload_if_changed()
    assert "RocketMQ" in validator.rules.accounts
