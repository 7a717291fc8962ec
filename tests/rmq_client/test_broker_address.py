"""4.9's rules for the address a consumer uses within a broker name
(`MQClientInstance.findBrokerAddressInSubscribe`): the asked-for id, then for a slave the next
id, then, unless only that broker will do, the lowest id the route lists."""

from __future__ import annotations

from rmq_client.routed_consumer import find_subscribe_address

BOTH = {0: "m:1", 1: "s:1"}


def test_the_master_while_the_route_lists_it() -> None:
    assert find_subscribe_address(BOTH, 0, False) == ("m:1", False)
    assert find_subscribe_address(BOTH, 0, True) == ("m:1", False)


def test_a_suggested_slave_is_followed() -> None:
    assert find_subscribe_address(BOTH, 1, False) == ("s:1", True)


def test_a_missing_slave_gives_way_to_the_next_id_then_to_any() -> None:
    assert find_subscribe_address({0: "m:1", 2: "s:2"}, 1, False) == ("s:2", True)
    assert find_subscribe_address({0: "m:1", 3: "s:3"}, 1, False) == ("m:1", False)
    assert find_subscribe_address({0: "m:1", 3: "s:3"}, 1, True) is None


def test_without_a_master_pulls_and_commits_go_to_the_slave() -> None:
    assert find_subscribe_address({1: "s:1"}, 0, False) == ("s:1", True)
    assert find_subscribe_address({2: "s:2", 1: "s:1"}, 0, False) == ("s:1", True)
    assert find_subscribe_address({1: "s:1"}, 0, True) is None
    assert find_subscribe_address({}, 0, False) is None
