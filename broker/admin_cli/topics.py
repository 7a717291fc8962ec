"""Topics: updateTopic, deleteTopic, topicList, topicRoute, topicStatus, with mqadmin's names,
flags and columns."""

from __future__ import annotations

import click

from broker.admin_cli.common import (
    AdminError,
    Target,
    admin_command,
    cluster_info,
    connect,
    masters,
    on_each,
    route_masters,
    topic_route,
)
from broker.admin_cli.groups import format_time
from broker.admin_cli.output import Report, Table
from protocol.admin_topic import MessageQueue, TopicOffset
from rmq_client import admin_groups as group_calls
from rmq_client.admin import DEFAULT_PERM, AdminClient

PERMS = ("2", "4", "6")


@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-r", "--readQueueNums", "read_queues", type=click.IntRange(1, 1024), default=8)
@click.option("-w", "--writeQueueNums", "write_queues", type=click.IntRange(1, 1024), default=8)
@click.option(
    "-p", "--perm", type=click.Choice(PERMS), default=str(DEFAULT_PERM), help="2:W 4:R 6:RW"
)
@click.option("-o", "--order", type=click.BOOL, default=False, help="An ordered topic.")
async def update_topic(  # noqa: PLR0917 (click passes every option)
    target: Target, topic: str, read_queues: int, write_queues: int, perm: str, order: bool
) -> Report:
    """Update or create a topic (on -b, on -c's masters, or on every master)."""
    config = {
        "topicName": topic,
        "readQueueNums": read_queues,
        "writeQueueNums": write_queues,
        "perm": int(perm),
        "order": order,
    }
    report = Report({"topic": config, "brokers": []})
    await on_each(
        target,
        await masters(target),
        report,
        lambda conn: AdminClient(conn).create_topic(
            topic, read_queues, write_queues=write_queues, perm=int(perm), order=order
        ),
        lambda address: f"create topic to {address} success.",
    )
    return report


@click.option("-t", "--topic", required=True, help="Topic name.")
async def delete_topic(target: Target, topic: str) -> Report:
    """Delete a topic from the brokers (-b, -c's masters, or every master) and the name
    server."""
    route = await topic_route(target, topic)
    brokers = await masters(target) if target.broker or target.cluster else route_masters(route)
    report = Report({"topic": topic, "brokers": [], "namesrv": False})
    await on_each(
        target,
        brokers,
        report,
        lambda conn: AdminClient(conn).delete_topic(topic),
        lambda address: f"delete topic [{topic}] from broker [{address}] success.",
    )
    if target.namesrv is not None and not report.errors:
        async with connect(target, target.namesrv, "name server") as conn:
            await AdminClient(conn).delete_topic_in_namesrv(topic, target.cluster)
        report.data["namesrv"] = True
        report.lines.append(f"delete topic [{topic}] from NameServer success.")
    return report


@click.option("-c", "--clusterModel", "cluster_model", is_flag=True, help="With cluster, groups.")
async def topic_list(target: Target, cluster_model: bool) -> Report:
    """Every topic the name server knows; with -c its cluster and consumer groups."""
    namesrv = target.namesrv or target.require_namesrv()
    async with connect(target, namesrv, "name server") as conn:
        topics = sorted(await AdminClient(conn).all_topics())
    if not cluster_model:
        table = Table(["Topic"], [[t] for t in topics])
        return Report({"topics": topics}, [table])
    info = await cluster_info(target)
    table = Table(["Cluster Name", "Topic", "Consumer Group"])
    rows = []
    async with connect(target, namesrv, "name server") as conn:
        by_cluster = {
            c: await AdminClient(conn).topics_by_cluster(c) for c in sorted(info.cluster_addr_table)
        }
    for topic in topics:
        cluster = next((c for c, ts in by_cluster.items() if topic in ts), "")
        groups: set[str] = set()
        for broker in route_masters(await topic_route(target, topic)):
            async with connect(target, broker.address) as conn:
                groups.update(await group_calls.query_topic_consume_by_who(conn, topic))
        for group in sorted(groups) or [""]:
            table.add(cluster, topic, group)
        rows.append({"cluster": cluster, "topic": topic, "groups": sorted(groups)})
    return Report({"topics": rows}, [table])


@click.option("-t", "--topic", required=True, help="Topic name.")
async def topic_route_command(target: Target, topic: str) -> Report:
    """A topic's route: its brokers, their addresses and queue numbers."""
    route = await topic_route(target, topic)
    table = Table(["ClusterName", "BrokerName", "BrokerAddrs", "ReadQueue", "WriteQueue", "Perm"])
    queues = {q.broker_name: q for q in route.queue_datas}
    for b in sorted(route.broker_datas, key=lambda b: b.broker_name):
        q = queues.get(b.broker_name)
        addrs = ", ".join(f"{i}={a}" for i, a in sorted(b.broker_addrs.items()))
        cells = (q.read_queue_nums, q.write_queue_nums, q.perm) if q else ("", "", "")
        table.add(b.cluster, b.broker_name, addrs, *cells)
    read = sum(q.read_queue_nums for q in route.queue_datas)
    write = sum(q.write_queue_nums for q in route.queue_datas)
    data = {
        "brokerDatas": [b.to_dict() for b in route.broker_datas],
        "queueDatas": [q.to_dict() for q in route.queue_datas],
    }
    return Report(data, [table], [f"Total: {len(queues)} brokers, {read} read, {write} write"])


@click.option("-t", "--topic", required=True, help="Topic name.")
async def topic_status(target: Target, topic: str) -> Report:
    """Each queue of a topic: min and max offset, time of the last message stored."""
    brokers = (
        await masters(target) if target.broker else route_masters(await topic_route(target, topic))
    )
    offsets: dict[MessageQueue, TopicOffset] = {}
    for broker in brokers:
        async with connect(target, broker.address) as conn:
            offsets.update((await AdminClient(conn).topic_stats(topic)).offset_table)
    if not offsets:
        raise AdminError(f"topic {topic!r} has no queue on its brokers")
    table = Table(["Broker Name", "QID", "Min Offset", "Max Offset", "Last Updated"])
    rows = []
    for mq, o in sorted(offsets.items(), key=lambda i: (i[0].broker_name, i[0].queue_id)):
        table.add(mq.broker_name, mq.queue_id, o.min_offset, o.max_offset,
                  format_time(o.last_update_timestamp))  # fmt: skip
        rows.append({"brokerName": mq.broker_name, "queueId": mq.queue_id, **o.to_dict()})
    return Report({"topic": topic, "queues": rows}, [table])


COMMANDS = [
    admin_command("updateTopic")(update_topic),
    admin_command("deleteTopic")(delete_topic),
    admin_command("topicList", cluster=False)(topic_list),
    admin_command("topicRoute")(topic_route_command),
    admin_command("topicStatus")(topic_status),
]
