"""`rmq-broker admin` group and connection commands against a broker with traffic:
consumerProgress (--json values, the table's columns and totals), resetOffsetByTime with and
without a live consumer, consumerConnection, producerConnection, updateSubGroup and
deleteSubGroup; consumerProgress -s true naming each queue's client from the client's own
running info; and the one-line errors of bad input."""

from __future__ import annotations

import time

import trio

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from rmq_client.admin_groups import get_all_subscription_groups, get_consume_stats
from rmq_client.producer import Producer, open_producer
from rmq_client.pull_consumer import PullConsumer, open_pull_consumer
from tests.broker.cli_admin.support import admin, plain_rows, send_per_queue
from tests.daemon import Daemon

FIRST = (2, 1, 3, 0)
SECOND = (3, 3, 1, 2)


async def dispatched(producer: Producer, topic: str, counts: tuple[int, ...]) -> None:
    """Until the consume queues hold `counts` messages (the dispatch is asynchronous)."""
    with trio.fail_after(5):
        while True:
            stats = await get_consume_stats(producer, "any_group", topic)
            ends = {mq.queue_id: w.broker_offset for mq, w in stats.offset_table.items()}
            if all(ends.get(q, 0) == n for q, n in enumerate(counts)):
                return
            await trio.sleep(0.01)


async def commit_all(consumer: PullConsumer, topic: str, offsets: tuple[int, ...]) -> None:
    for queue_id, offset in enumerate(offsets):
        await consumer.commit(topic, queue_id, offset)


def addr(daemon: Daemon) -> str:
    return f"127.0.0.1:{daemon.port}"


async def test_consumer_progress_shows_offsets_lag_and_totals(
    daemon: Daemon, client: Producer
) -> None:
    topic, group = "CliProgress", "cli_progress"
    await send_per_queue(client, topic, FIRST)
    await dispatched(client, topic, FIRST)
    async with open_pull_consumer("127.0.0.1", daemon.port, group) as consumer:
        await commit_all(consumer, topic, (2, 0, 1, 0))
    data = (await admin("consumerProgress", "-n", addr(daemon), "-g", group, "--json")).json()
    queues = {q["queueId"]: q for q in data["queues"]}
    assert {q: (v["brokerOffset"], v["consumerOffset"], v["diff"]) for q, v in queues.items()} == {
        0: (2, 2, 0),
        1: (1, 0, 1),
        2: (3, 1, 2),
        3: (0, 0, 0),
    }
    assert data["diffTotal"] == 3 and data["group"] == group
    assert {q["topic"] for q in data["queues"]} == {topic}
    assert {q["brokerName"] for q in data["queues"]} == {"broker-a"}
    assert queues[0]["lastTimestamp"] > 0  # the last consumed message's store time
    assert queues[3]["lastTimestamp"] == 0

    human = await admin("consumerProgress", "-n", addr(daemon), "-g", group)
    assert human.code == 0
    header = human.stdout.splitlines()[0].split("\t")
    assert header == [
        "#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff",
        "#LastTime",
    ]  # fmt: skip
    rows = plain_rows(human.stdout)
    assert [r[:6] for r in rows] == [
        [topic, "broker-a", "0", "2", "2", "0"],
        [topic, "broker-a", "1", "1", "0", "1"],
        [topic, "broker-a", "2", "3", "1", "2"],
        [topic, "broker-a", "3", "0", "0", "0"],
    ]
    assert rows[3][6] == "N/A" and rows[0][6].startswith(time.strftime("%Y-"))
    assert "Diff Total: 3" in human.stdout and "Consume TPS: 0.00" in human.stdout

    every = (await admin("consumerProgress", "-n", addr(daemon), "--json")).json()["groups"]
    assert {"group": group, "count": 0, "version": None, "consumeType": None,
            "messageModel": None, "consumeTps": 0.0, "diffTotal": 3} in every  # fmt: skip
    async with open_pull_consumer("127.0.0.1", daemon.port, group) as consumer:
        await consumer.subscribe(topic)
        human = await admin("consumerProgress", "-n", addr(daemon))
        assert "#Group\t#Count\t#Version\t#Type\t#Model\t#TPS\t#Diff Total" in human.stdout
        assert f"{group}\t1\t" in human.stdout
        assert "\tCONSUME_ACTIVELY\tCLUSTERING\t0.00\t3" in human.stdout


async def test_reset_by_time_moves_the_offsets_consumer_progress_shows(
    daemon: Daemon, client: Producer
) -> None:
    topic, group = "CliReset", "cli_reset"
    await send_per_queue(client, topic, FIRST)
    await dispatched(client, topic, FIRST)
    await trio.sleep(0.02)  # store times are in ms: the reset point lies between the batches
    between = int(time.time() * 1000)
    await trio.sleep(0.02)
    ends = tuple(a + b for a, b in zip(FIRST, SECOND, strict=True))
    await send_per_queue(client, topic, SECOND)
    await dispatched(client, topic, ends)
    here = addr(daemon)

    async with open_pull_consumer("127.0.0.1", daemon.port, group) as consumer:
        await consumer.subscribe(topic)  # live: the broker resets and tells the client
        await commit_all(consumer, topic, ends)
        run = await admin(
            "resetOffsetByTime", "-n", here, "-g", group, "-t", topic, "-s", str(between), "--json"
        )
        assert {q["queueId"]: q["offset"] for q in run.json()["queues"]} == dict(enumerate(FIRST))
    progress = (await admin("consumerProgress", "-n", here, "-g", group, "--json")).json()
    by_queue = {q["queueId"]: q["consumerOffset"] for q in progress["queues"]}
    assert by_queue == dict(enumerate(FIRST))
    assert progress["diffTotal"] == sum(SECOND)

    # the consumer is gone: the broker refuses (CONSUMER_NOT_ONLINE) and the command finds
    # each queue's offset by time and commits it, as mqadmin does
    run = await admin("resetOffsetByTime", "-n", here, "-g", group, "-t", topic, "-s", "0", "-c")
    assert run.code == 0, run.stderr
    assert "#brokerName\t#queueId\t#offset" in run.stdout
    assert [r[1:] for r in plain_rows(run.stdout.split("\n", 1)[1])] == [
        [str(q), "0"] for q in range(4)
    ]
    progress = (await admin("consumerProgress", "-b", here, "-g", group, "--json")).json()
    by_queue = {q["queueId"]: q["consumerOffset"] for q in progress["queues"]}
    assert by_queue == dict.fromkeys(range(4), 0)
    assert progress["diffTotal"] == sum(ends)


async def test_connections_of_live_clients(daemon: Daemon, client: Producer) -> None:
    topic, group = "CliConnections", "cli_connections"
    await send_per_queue(client, topic, FIRST)
    await client.heartbeat("cli-producer@1")
    here = addr(daemon)
    async with open_pull_consumer(
        "127.0.0.1", daemon.port, group, client_id="cli-consumer@7"
    ) as consumer:
        await consumer.subscribe(topic, "TagA || TagB")
        data = (await admin("consumerConnection", "-n", here, "-g", group, "--json")).json()
        assert [c["clientId"] for c in data["connections"]] == ["cli-consumer@7"]
        assert data["subscriptions"] == {topic: "TagA || TagB"}
        assert data["messageModel"] == "CLUSTERING"
        human = await admin("consumerConnection", "-n", here, "-g", group)
        assert "#ClientId\t#ClientAddr\t#Language\t#Version" in human.stdout
        assert "cli-consumer@7\t127.0.0.1:" in human.stdout
        assert "MessageModel: CLUSTERING" in human.stdout
    run = await admin(
        "producerConnection", "-n", here, "-g", "DEFAULT_PRODUCER", "-t", topic, "--json"
    )
    assert [c["clientId"] for c in run.json()["connections"]] == ["cli-producer@1"]


async def test_update_and_delete_a_subscription_group(daemon: Daemon, client: Producer) -> None:
    here = addr(daemon)
    run = await admin(
        "updateSubGroup", "-n", here, "-g", "cli_sub", "-s", "false", "-r", "5", "-q", "2"
    )
    assert run.stdout == f"create subscription group to {here} success.\n"
    config = (await get_all_subscription_groups(client)).table["cli_sub"]
    assert (config.consume_enable, config.retry_max_times, config.retry_queue_nums) == (
        False,
        5,
        2,
    )
    run = await admin("deleteSubGroup", "-b", here, "-g", "cli_sub", "--json")
    assert run.json()["brokers"] == [here]
    assert "cli_sub" not in (await get_all_subscription_groups(client)).table


async def test_bad_input_is_one_line_and_a_nonzero_exit(daemon: Daemon, client: Producer) -> None:
    topic = "CliBadInput"
    await send_per_queue(client, topic, FIRST)
    here = addr(daemon)
    unknown = await admin("consumerProgress", "-n", here, "-g", "no_such_group")
    assert "no_such_group" in unknown.error_line(1)
    offline = await admin("consumerConnection", "-n", here, "-g", "no_such_group")
    assert "no live consumer" in offline.error_line(1)
    no_topic = await admin("resetOffsetByTime", "-n", here, "-g", "g", "-t", "NoTopic", "-s", "0")
    assert "NoTopic" in no_topic.error_line(1)
    never = await admin("resetOffsetByTime", "-n", here, "-g", "never_g", "-t", topic, "-s", "0")
    assert "never_g" in never.error_line(1)
    wrong_flag = await admin("consumerProgress", "-n", here, "-g", "g", "--bogus")
    assert "--bogus" in wrong_flag.error_line(2)
    missing = await admin("resetOffsetByTime", "-n", here, "-t", topic, "-s", "0")
    assert "--group" in missing.error_line(2)
    bad_time = await admin("resetOffsetByTime", "-n", here, "-g", "g", "-t", topic, "-s", "x")
    assert "yyyy-MM-dd#HH:mm:ss:SSS" in bad_time.error_line(2)
    no_namesrv = await admin("consumerProgress", "-g", "g")
    assert "-n HOST:PORT" in no_namesrv.error_line(2)
    bad_addr = await admin("consumerProgress", "-n", "nowhere", "-g", "g")
    assert "HOST:PORT" in bad_addr.error_line(2)
    unknown_command = await admin("noSuchCommand")
    assert "noSuchCommand" in unknown_command.error_line(2)


def running_info(topic: str, queue_ids: tuple[int, ...]) -> bytes:
    """A consumer's running info as the Java client writes it: MessageQueue objects as keys."""
    keys = [f'{{"brokerName":"broker-a","queueId":{q},"topic":"{topic}"}}' for q in queue_ids]
    table = ",".join(f'{key}:{{"cachedMsgCount":0}}' for key in keys)
    return f'{{"mqTable":{{{table}}},"properties":{{}}}}'.encode()


async def test_show_client_ip_names_the_client_holding_each_queue(
    daemon: Daemon, client: Producer
) -> None:
    topic, group = "CliClientIp", "cli_client_ip"
    await send_per_queue(client, topic, FIRST)
    await dispatched(client, topic, FIRST)
    async with open_producer("127.0.0.1", daemon.port) as conn, trio.open_nursery() as nursery:
        consumer = PullConsumer(conn, group, "10.1.2.3@cli-ip")
        send, requests = trio.open_memory_channel[RemotingCommand](16)
        conn.broker_requests = send
        await consumer.subscribe(topic)
        await commit_all(consumer, topic, (0, 0, 0, 0))

        async def answer() -> None:
            async for asked in requests:
                if asked.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
                    continue  # the group gained this client
                assert asked.code == RequestCode.GET_CONSUMER_RUNNING_INFO
                body = running_info(topic, (0, 2))
                await conn.reply(asked.make_response(ResponseCode.SUCCESS, body=body))

        nursery.start_soon(answer)
        here = addr(daemon)
        run = await admin("consumerProgress", "-n", here, "-g", group, "-s", "true", "--json")
        ips = {q["queueId"]: q["clientIp"] for q in run.json()["queues"]}
        assert ips == {0: "10.1.2.3", 1: "N/A", 2: "10.1.2.3", 3: "N/A"}
        human = await admin("consumerProgress", "-n", here, "-g", group, "-s", "true")
        assert "#Consumer Offset\t#Client IP\t#Diff" in human.stdout
        assert [r[5] for r in plain_rows(human.stdout)] == ["10.1.2.3", "N/A", "10.1.2.3", "N/A"]
        nursery.cancel_scope.cancel()
