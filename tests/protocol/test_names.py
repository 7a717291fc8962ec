"""Name rules: topics and groups as RocketMQ 4.9 checks them; client ids bounded, printable."""

from __future__ import annotations

import pytest

from protocol.codes import ResponseCode
from protocol.errors import HeaderFieldError
from protocol.names import (
    GROUP_MAX_LENGTH,
    TOPIC_MAX_LENGTH,
    check_client_id,
    check_group_name,
    check_topic_name,
)

GOOD_NAMES = ["g", "%RETRY%group", "a|b", "A-z_09", "CID_ONS-http_1"]
BAD_CHARACTERS = ["a.b", "a b", "a@b", "é", "a\x00b", "a/b", "组"]


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_upstream_names_pass(name: str) -> None:
    assert check_topic_name("topic", name) == name
    assert check_group_name("groupName", name) == name


@pytest.mark.parametrize("name", BAD_CHARACTERS)
def test_characters_outside_the_pattern_are_refused(name: str) -> None:
    with pytest.raises(HeaderFieldError, match="illegal characters"):
        check_topic_name("topic", name)
    with pytest.raises(HeaderFieldError, match="illegal characters") as info:
        check_group_name("consumerGroup", name)
    assert info.value.field == "consumerGroup"
    assert info.value.response_code == ResponseCode.SYSTEM_ERROR


@pytest.mark.parametrize("name", ["", " ", "\t\n"])
def test_blank_names_are_refused(name: str) -> None:
    with pytest.raises(HeaderFieldError, match="blank"):
        check_topic_name("topic", name)
    with pytest.raises(HeaderFieldError, match="blank"):
        check_group_name("group", name)
    with pytest.raises(HeaderFieldError, match="blank"):
        check_client_id("clientID", name)


def test_lengths_are_upstreams() -> None:
    assert check_topic_name("topic", "t" * TOPIC_MAX_LENGTH)
    with pytest.raises(HeaderFieldError, match="longer than topic max length"):
        check_topic_name("topic", "t" * (TOPIC_MAX_LENGTH + 1))
    assert check_group_name("group", "g" * GROUP_MAX_LENGTH)
    with pytest.raises(HeaderFieldError, match="longer than group max length 255") as info:
        check_group_name("group", "g" * 1_000_000)
    assert len(str(info.value)) < 100


@pytest.mark.parametrize(
    "client_id", ["10.0.0.5@123", "26776-127.0.0.1@DEFAULT", "ip@pid#1#2", "é@1"]
)
def test_client_ids_of_real_clients_pass(client_id: str) -> None:
    assert check_client_id("clientID", client_id) == client_id


@pytest.mark.parametrize(
    ("client_id", "problem"),
    [("a\x00b", "control character"), ("a\nb", "control character"), ("x" * 256, "longer")],
)
def test_client_ids_are_printable_and_bounded(client_id: str, problem: str) -> None:
    with pytest.raises(HeaderFieldError, match=problem) as info:
        check_client_id("clientID", client_id)
    assert info.value.field == "clientID"
    assert len(str(info.value)) < 120
