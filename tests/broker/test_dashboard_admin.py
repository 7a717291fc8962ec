"""The dashboard and the admin requests give the same figures, since they share their code:
a group's queues in `group.json` and GET_CONSUME_STATS, a topic's queues in `topics.json` and
GET_TOPIC_STATS_INFO, for a broker with traffic over a real socket; the page's rates are the
broker's own; the permission shown is the live one (WIPE / ADD_WRITE_PERM_OF_BROKER)."""

from __future__ import annotations

import pathlib

import trio

from broker.dashboard import views
from rmq_client.admin import open_admin
from rmq_client.admin_groups import get_consume_stats
from rmq_client.producer import Message, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from tests.broker.dashboard_helpers import document, http_port, start

TOPIC = "Agreement"
GROUP = "agreement_group"
#: messages sent to each write queue; the topic has fewer read queues than write queues, so a
#: figure that counted the wrong set of queues would disagree
SENT = (5, 3, 0, 7, 2, 4)
READ_QUEUES = 4
#: queue id -> offset the group commits (queue 2 stays uncommitted)
COMMITS = {0: 5, 1: 1, 3: 4}


async def send_and_consume(port: int) -> None:
    async with open_admin("127.0.0.1", port) as admin:
        await admin.create_topic(TOPIC, READ_QUEUES, write_queues=len(SENT))
    async with open_producer("127.0.0.1", port) as producer:
        for queue_id, count in enumerate(SENT):
            for n in range(count):
                await producer.send(Message(TOPIC, f"{queue_id}-{n}".encode(), queue_id=queue_id))


async def test_group_document_and_consume_stats_agree_on_every_queue(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start(nursery, tmp_path)
    await send_and_consume(broker.port)
    async with open_pull_consumer("127.0.0.1", broker.port, GROUP) as consumer:
        await consumer.subscribe(TOPIC)
        for queue_id in range(READ_QUEUES):
            await consumer.commit(TOPIC, queue_id, 0)  # where it starts: a rate counts from here
        for queue_id, offset in COMMITS.items():
            await consumer.pull(TOPIC, queue_id, 0, max_nums=offset)
            await consumer.commit(TOPIC, queue_id, offset)
        detail = await document(http_port(broker), "group", f"?group={GROUP}")
        listed = await document(http_port(broker), "groups")
        async with open_producer("127.0.0.1", broker.port) as admin:
            stats = await get_consume_stats(admin, GROUP)
    page = {
        (q["topic"], q["queue_id"]): (q["broker_offset"], q["consumer_offset"], q["lag"], q["last"])
        for q in detail["queues"]
    }
    admin_side = {
        (mq.topic, mq.queue_id): (
            w.broker_offset,
            w.consumer_offset,
            w.broker_offset - w.consumer_offset,
            w.last_timestamp,
        )
        for mq, w in stats.offset_table.items()
    }
    assert page == admin_side
    # what the traffic made: every readable queue, its end, the commit, a time where consumed
    assert sorted(page) == [(TOPIC, q) for q in range(READ_QUEUES)]
    assert [page[(TOPIC, q)][:3] for q in range(READ_QUEUES)] == [
        (5, 5, 0),
        (3, 1, 2),
        (0, 0, 0),
        (7, 4, 3),
    ]
    assert all((page[(TOPIC, q)][3] > 0) == (q in COMMITS) for q in range(READ_QUEUES))
    summary = next(g for g in listed["groups"] if g["group"] == GROUP)
    assert summary["lag"] == detail["lag"] == sum(v[2] for v in admin_side.values()) == 5
    assert summary["consumer_offset_total"] == sum(
        w.consumer_offset for w in stats.offset_table.values()
    )
    # the rates come from the broker's sampler: the group consumed and its topic was sent to
    assert stats.consume_tps > 0
    assert summary["consume_tps"] > 0 and summary["send_tps"] > 0
    await broker.stop()


async def test_topic_document_and_topic_stats_agree_on_every_queue(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start(nursery, tmp_path)
    await send_and_consume(broker.port)
    listed = await document(http_port(broker), "topics")
    async with open_admin("127.0.0.1", broker.port) as admin:
        stats = await admin.topic_stats(TOPIC)
    topic = next(t for t in listed["topics"] if t["topic"] == TOPIC)
    admin_side = {
        mq.queue_id: (o.min_offset, o.max_offset, o.last_update_timestamp)
        for mq, o in stats.offset_table.items()
    }
    # the list reads no store time; every offset agrees
    assert {q["queue_id"]: (q["min_offset"], q["max_offset"]) for q in topic["queues"]} == {
        queue_id: figures[:2] for queue_id, figures in admin_side.items()
    }
    assert [admin_side[q][1] for q in range(len(SENT))] == list(SENT)
    assert topic["max_offset_total"] == topic["messages"] == sum(SENT)
    assert topic["send_tps"] > 0
    # asked for every queue with its time, as an admin request is, the view agrees on times too
    full = views.topic_stats(broker.server.broker, TOPIC)
    assert full is not None
    assert {
        q["queue_id"]: (q["min_offset"], q["max_offset"], q["last"]) for q in full["queues"]
    } == (admin_side)
    assert all((last > 0) == (sent > 0) for (_, _, last), sent in zip(
        (admin_side[q] for q in range(len(SENT))), SENT, strict=True
    ))  # fmt: skip
    await broker.stop()


async def test_broker_document_shows_the_live_permission(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start(nursery, tmp_path)
    port = http_port(broker)
    assert (await document(port, "broker"))["permission"] == "RW"
    async with open_admin("127.0.0.1", broker.port) as admin:
        assert await admin.wipe_write_perm("broker-a") > 0
        assert (await document(port, "broker"))["permission"] == "R-"
        await admin.add_write_perm("broker-a")
        assert (await document(port, "broker"))["permission"] == "RW"
    await broker.stop()
