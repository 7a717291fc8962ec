"""`BlockingConsumer` against a real broker: nothing lost or repeated across calls, offsets
committed for the group, tag filters, and a clear timeout."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rmq_client import BlockingConsumer, BlockingProducer, BrokerProcess, Message


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with BrokerProcess() as running:
        yield running


def send(broker: BrokerProcess, topic: str, bodies: list[bytes], tags: str | None = None) -> None:
    with BlockingProducer(broker.host, broker.port) as producer:
        for body in bodies:
            producer.send(Message(topic, body, tags=tags))


def test_messages_beyond_count_wait_for_the_next_call(broker: BrokerProcess) -> None:
    bodies = [f"m{i}".encode() for i in range(12)]  # over every queue of the topic
    send(broker, "Leftovers", bodies)
    with BlockingConsumer(broker.host, broker.port, "leftovers") as consumer:
        first = consumer.receive("Leftovers", count=5)
        second = consumer.receive("Leftovers", count=7)
        assert len(first) == 5
        assert sorted(m.body for m in first + second) == sorted(bodies)
        with pytest.raises(TimeoutError, match="0 of 1 messages of Leftovers arrived"):
            consumer.receive("Leftovers", timeout_s=0.5)
    # the group's offsets are on the broker: a new member starts after them
    send(broker, "Leftovers", [b"late"])
    with BlockingConsumer(broker.host, broker.port, "leftovers") as again:
        assert [m.body for m in again.receive("Leftovers")] == [b"late"]


def test_what_was_pulled_but_not_returned_is_not_committed(broker: BrokerProcess) -> None:
    bodies = [f"k{i}".encode() for i in range(8)]
    send(broker, "Uncommitted", bodies)
    with BlockingConsumer(broker.host, broker.port, "uncommitted") as consumer:
        (first,) = consumer.receive("Uncommitted")
    with BlockingConsumer(broker.host, broker.port, "uncommitted") as successor:
        rest = successor.receive("Uncommitted", count=7)
    assert sorted([first.body, *(m.body for m in rest)]) == sorted(bodies)


def test_a_short_wait_keeps_what_came_and_a_filter_skips_other_tags(
    broker: BrokerProcess,
) -> None:
    send(broker, "Tagged", [b"a1", b"a2"], tags="A")
    send(broker, "Tagged", [b"b1"], tags="B")
    with BlockingConsumer(broker.host, broker.port, "tagged") as consumer:
        with pytest.raises(TimeoutError, match="2 of 3 messages of Tagged"):
            consumer.receive("Tagged", count=3, expression="A", timeout_s=1)
        send(broker, "Tagged", [b"a3"], tags="A")
        got = consumer.receive("Tagged", count=3, expression="A")
    assert sorted(m.body for m in got) == [b"a1", b"a2", b"a3"]
    assert {m.tags for m in got} == {"A"}


def test_a_count_below_one_is_refused(broker: BrokerProcess) -> None:
    with (
        BlockingConsumer(broker.host, broker.port, "nothing") as consumer,
        pytest.raises(ValueError, match="count must be at least 1"),
    ):
        consumer.receive("Anything", count=0)
