"""Topic commands through `rmq-broker admin` against a broker with traffic: updateTopic then
topicStatus shows the queues and the offsets the sends reached; topicRoute, topicList (with
the consuming groups), deleteTopic; and the one-line errors of bad input."""

from __future__ import annotations

import trio

from rmq_client.admin import AdminClient
from rmq_client.producer import Message, Producer
from rmq_client.pull_consumer import open_pull_consumer
from tests.broker.cli_admin.support import admin, plain_rows
from tests.daemon import Daemon

TOPIC = "CliTopic"
COUNTS = (1, 0, 2, 0, 0, 3, 0, 1)


async def stats_reach(client: Producer, topic: str, counts: tuple[int, ...]) -> None:
    """Until each queue's max offset is its count (the consume queues are written later)."""
    with trio.fail_after(5):
        while True:
            stats = await AdminClient(client).topic_stats(topic)
            ends = {mq.queue_id: o.max_offset for mq, o in stats.offset_table.items()}
            if ends == dict(enumerate(counts)):
                return
            await trio.sleep(0.01)


async def test_update_topic_then_status_route_list_and_delete(
    daemon: Daemon, client: Producer
) -> None:
    here = f"127.0.0.1:{daemon.port}"
    run = await admin("updateTopic", "-n", here, "-t", TOPIC, "-r", "8", "-w", "8", "-p", "6")
    assert (run.code, run.stdout) == (0, f"create topic to {here} success.\n")
    empty = (await admin("topicStatus", "-n", here, "-t", TOPIC, "--json")).json()
    assert [(q["queueId"], q["minOffset"], q["maxOffset"]) for q in empty["queues"]] == [
        (q, 0, 0) for q in range(8)
    ]
    for queue_id, count in enumerate(COUNTS):
        for _ in range(count):
            await client.send(Message(TOPIC, b"x", queue_id=queue_id))
    await stats_reach(client, TOPIC, COUNTS)
    status = (await admin("topicStatus", "-n", here, "-t", TOPIC, "--json")).json()
    assert {q["queueId"]: q["maxOffset"] for q in status["queues"]} == dict(enumerate(COUNTS))
    assert all(q["lastUpdateTimestamp"] > 0 for q in status["queues"] if q["maxOffset"])
    human = await admin("topicStatus", "-n", here, "-t", TOPIC)
    assert human.stdout.startswith("#Broker Name\t#QID\t#Min Offset\t#Max Offset\t#Last Updated\n")
    rows = plain_rows(human.stdout)
    assert [r[:4] for r in rows] == [
        ["broker-a", str(q), "0", str(n)] for q, n in enumerate(COUNTS)
    ]
    assert rows[1][4] == "N/A"

    route = (await admin("topicRoute", "-n", here, "-t", TOPIC, "--json")).json()
    queue_data = route["queueDatas"][0]
    assert (queue_data["readQueueNums"], queue_data["writeQueueNums"], queue_data["perm"]) == (
        8,
        8,
        6,
    )
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": here}
    human = await admin("topicRoute", "-n", here, "-t", TOPIC)
    assert plain_rows(human.stdout) == [["DefaultCluster", "broker-a", f"0={here}", "8", "8", "6"]]

    async with open_pull_consumer("127.0.0.1", daemon.port, "cli_topic_group") as consumer:
        await consumer.commit(TOPIC, 0, 1)
    assert TOPIC in (await admin("topicList", "-n", here, "--json")).json()["topics"]
    listed = (await admin("topicList", "-n", here, "-c", "--json")).json()["topics"]
    entry = next(t for t in listed if t["topic"] == TOPIC)
    assert entry == {"cluster": "DefaultCluster", "topic": TOPIC, "groups": ["cli_topic_group"]}
    human = await admin("topicList", "-n", here, "-c")
    assert "#Cluster Name\t#Topic\t#Consumer Group" in human.stdout
    assert f"DefaultCluster\t{TOPIC}\tcli_topic_group" in human.stdout

    run = await admin("deleteTopic", "-n", here, "-t", TOPIC)
    assert run.stdout.splitlines() == [
        f"delete topic [{TOPIC}] from broker [{here}] success.",
        f"delete topic [{TOPIC}] from NameServer success.",
    ]
    assert TOPIC not in (await admin("topicList", "-n", here, "--json")).json()["topics"]
    gone = await admin("topicStatus", "-n", here, "-t", TOPIC)
    assert TOPIC in gone.error_line(1)


async def test_bad_topic_input_is_one_line(daemon: Daemon) -> None:
    here = f"127.0.0.1:{daemon.port}"
    assert (
        "NoSuchTopic" in (await admin("topicStatus", "-n", here, "-t", "NoSuchTopic")).error_line()
    )
    assert (
        "NoSuchTopic" in (await admin("topicRoute", "-n", here, "-t", "NoSuchTopic")).error_line()
    )
    assert (
        "NoSuchTopic" in (await admin("deleteTopic", "-n", here, "-t", "NoSuchTopic")).error_line()
    )
    bad_perm = await admin("updateTopic", "-n", here, "-t", "T", "-p", "5")
    assert "-p" in bad_perm.error_line(2)
    bad_queues = await admin("updateTopic", "-n", here, "-t", "T", "-r", "0")
    assert "0" in bad_queues.error_line(2)
    bad_name = await admin("updateTopic", "-n", here, "-t", "bad topic!")
    assert "illegal characters" in bad_name.error_line(1)
    assert "-t" in (await admin("topicStatus", "-n", here)).error_line(2)
