"""The per-send topic-name check remembers the names that passed, and only those."""

from __future__ import annotations

import pytest

from broker.processors import send_checks
from broker.processors.send_checks import check_topic_name
from protocol.errors import HeaderFieldError


@pytest.mark.parametrize("bad", ["", "  ", "a b", "topic!", "x" * 128])
def test_a_bad_name_is_refused_every_time_after_good_ones(bad: str) -> None:
    check_topic_name("GoodTopic")
    check_topic_name("GoodTopic")  # remembered: answered from the set
    for _ in range(2):  # a refused name is never remembered
        with pytest.raises(HeaderFieldError):
            check_topic_name(bad)
    assert bad not in send_checks._VALID_TOPICS


def test_the_remembered_names_stay_bounded() -> None:
    for n in range(send_checks._MAX_VALID_TOPICS + 10):
        check_topic_name(f"T{n}")
    assert 0 < len(send_checks._VALID_TOPICS) <= send_checks._MAX_VALID_TOPICS
    with pytest.raises(HeaderFieldError):
        check_topic_name("still bad")
