"""Consumer groups and connections: updateSubGroup, deleteSubGroup, consumerProgress,
consumerConnection, producerConnection, resetOffsetByTime (mqadmin's names, flags, columns)."""

from __future__ import annotations

import datetime
import time
from typing import Any

import click

from broker.admin_cli.common import (
    AdminError,
    AdminUsageError,
    BrokerAt,
    Target,
    admin_command,
    connect,
    label,
    masters,
    on_each,
    route_masters,
    topic_route,
)
from broker.admin_cli.output import Report, Table
from protocol.admin_group import (
    ConsumerConnection,
    ConsumeStats,
    MessageQueue,
    OffsetWrapper,
    SubscriptionGroupConfig,
)
from protocol.codes import ResponseCode
from protocol.fastjson import ObjectKey
from rmq_client import admin_groups as calls
from rmq_client.producer import RequestTimeoutError, SendError
from rmq_client.pull_consumer import PullConsumer

ADMIN_CLIENT_ID = "rmq-broker-admin@0"


def format_time(ms: int) -> str:
    """mqadmin's LastTime: local `yyyy-MM-dd HH:mm:ss`, N/A for no time."""
    if ms <= 0:
        return "N/A"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


@click.option("-g", "--groupName", "group", required=True, help="Consumer group.")
@click.option("-s", "--consumeEnable", "consume_enable", type=click.BOOL, default=True)
@click.option("-m", "--consumeFromMinEnable", "from_min", type=click.BOOL, default=False)
@click.option("-d", "--consumeBroadcastEnable", "broadcast", type=click.BOOL, default=False)
@click.option("-q", "--retryQueueNums", "retry_queues", type=click.IntRange(0, 1024), default=1)
@click.option("-r", "--retryMaxTimes", "retry_max", type=click.IntRange(-1, 1_000_000), default=16)
@click.option("-i", "--brokerId", "broker_id", type=click.IntRange(0), default=0)
@click.option("-w", "--whichBrokerWhenConsumeSlowly", "slow_broker", type=int, default=1)
@click.option("-a", "--notifyConsumerIdsChanged", "notify", type=click.BOOL, default=True)
async def update_sub_group(  # noqa: PLR0917 (click passes every option)
    target: Target,
    group: str,
    consume_enable: bool,
    from_min: bool,
    broadcast: bool,
    retry_queues: int,
    retry_max: int,
    broker_id: int,
    slow_broker: int,
    notify: bool,
) -> Report:
    """Update or create a subscription group (on -b, on -c's masters, or on every master)."""
    config = SubscriptionGroupConfig(
        group, consume_enable, retry_queues, retry_max, from_min, broadcast, broker_id,
        slow_broker, notify,
    )  # fmt: skip
    report = Report({"group": config.to_json(), "brokers": []})
    await on_each(
        target,
        await masters(target),
        report,
        lambda conn: calls.update_subscription_group(conn, config),
        lambda address: f"create subscription group to {address} success.",
    )
    return report


@click.option("-g", "--groupName", "group", required=True, help="Subscription group.")
@click.option("-r", "--removeOffset", "remove_offset", type=click.BOOL, default=False)
async def delete_sub_group(target: Target, group: str, remove_offset: bool) -> Report:
    """Delete a subscription group (and with -r true its committed offsets)."""
    report = Report({"group": group, "removeOffset": remove_offset, "brokers": []})
    await on_each(
        target,
        await masters(target),
        report,
        lambda conn: calls.delete_subscription_group(conn, group, remove_offset=remove_offset),
        lambda address: f"delete subscription group [{group}] from broker [{address}] success.",
    )
    return report


async def _running_queues(target: Target, broker: BrokerAt, group: str) -> dict[MessageQueue, str]:
    """Which client IP holds each queue: the consumers' own running info (its mqTable),
    relayed by the broker."""
    holders: dict[MessageQueue, str] = {}
    async with connect(target, broker.address) as conn:
        try:
            connections = await calls.get_consumer_connections(conn, group)
        except SendError:
            return holders
        for client in connections.connections:
            ip = client.client_id.split("@")[0]
            try:
                info = await calls.get_consumer_running_info(
                    conn, group, client.client_id, timeout_s=min(target.timeout_s, 3.0)
                )
            except (SendError, RequestTimeoutError):
                continue  # mqadmin shows N/A for a client that does not answer
            table = info.get("mqTable", {}) if isinstance(info, dict) else {}
            for key in table:
                if isinstance(key, ObjectKey):
                    d = key.fields
                    queue_id = d.get("queueId")
                    if isinstance(queue_id, int):
                        mq = MessageQueue(str(d.get("topic")), str(d.get("brokerName")), queue_id)
                        holders[mq] = ip
    return holders


async def _every_group(target: Target) -> Report:
    """mqadmin's consumerProgress without -g: one line per group with consume stats (the
    groups with settings or committed offsets)."""
    brokers = await masters(target)
    names: set[str] = set()
    for broker in brokers:
        async with connect(target, broker.address) as conn:
            names.update((await calls.get_all_subscription_groups(conn)).table)
            offsets = (await calls.get_all_consumer_offsets(conn)).offset_table
            names.update(key.rpartition("@")[2] for key in offsets)
    table = Table(["Group", "Count", "Version", "Type", "Model", "TPS", "Diff Total"])
    rows = []
    for group in sorted(names):
        tps, diff, found, live = 0.0, 0, False, None
        for broker in brokers:
            async with connect(target, broker.address) as conn:
                stats = await calls.get_consume_stats(conn, group)
                try:
                    live = live or await calls.get_consumer_connections(conn, group)
                except SendError as exc:
                    if exc.code != ResponseCode.CONSUMER_NOT_ONLINE:
                        raise
            found |= bool(stats.offset_table)
            tps += stats.consume_tps
            diff += sum(w.broker_offset - w.consumer_offset for w in stats.offset_table.values())
        if not found:
            continue
        clients = sorted(live.connections, key=lambda c: c.client_id) if live else []
        row = {
            "group": group,
            "count": len(clients),
            "version": clients[0].version if clients else None,
            "consumeType": live.consume_type if live else None,
            "messageModel": live.message_model if live else None,
            "consumeTps": tps,
            "diffTotal": diff,
        }
        rows.append(row)
        table.add(group, len(clients), *(row[k] for k in ("version", "consumeType")),
                  row["messageModel"], f"{tps:.2f}", diff)  # fmt: skip
    return Report({"groups": rows}, [table])


@click.option("-g", "--groupName", "group", default=None, help="Consumer group (all without).")
@click.option("-t", "--topic", default=None, help="Only this topic.")
@click.option("-s", "--showClientIP", "show_ip", type=click.BOOL, default=False)
async def consumer_progress(
    target: Target, group: str | None, topic: str | None, show_ip: bool
) -> Report:
    """A group's progress per queue: broker offset, consumer offset, diff (lag), last time;
    without -g a line per group: clients, TPS, Diff Total."""
    if group is None:
        return await _every_group(target)
    offsets: dict[MessageQueue, OffsetWrapper] = {}
    tps = 0.0
    holders: dict[MessageQueue, str] = {}
    for broker in await masters(target):
        async with connect(target, broker.address) as conn:
            stats: ConsumeStats = await calls.get_consume_stats(conn, group, topic)
        offsets.update(stats.offset_table)
        tps += stats.consume_tps
        if show_ip:
            holders.update(await _running_queues(target, broker, group))
    if not offsets:
        raise AdminError(
            f"group {group!r} has no consume stats: no such group, or it committed no offset"
        )
    columns = ["Topic", "Broker Name", "QID", "Broker Offset", "Consumer Offset"]
    columns += ["Client IP"] if show_ip else []
    table = Table([*columns, "Diff", "LastTime"])
    rows = []
    for mq, w in sorted(offsets.items()):
        diff = w.broker_offset - w.consumer_offset
        row: dict[str, Any] = {
            "topic": mq.topic,
            "brokerName": mq.broker_name,
            "queueId": mq.queue_id,
            "brokerOffset": w.broker_offset,
            "consumerOffset": w.consumer_offset,
            "diff": diff,
            "lastTimestamp": w.last_timestamp,
        }
        ip = [holders.get(mq, "N/A")] if show_ip else []
        if show_ip:
            row["clientIp"] = ip[0]
        rows.append(row)
        table.add(
            mq.topic, mq.broker_name, mq.queue_id, w.broker_offset, w.consumer_offset, *ip,
            diff, format_time(w.last_timestamp),
        )  # fmt: skip
    diff_total = sum(r["diff"] for r in rows)
    data = {"group": group, "consumeTps": tps, "diffTotal": diff_total, "queues": rows}
    lines = [f"Consume TPS: {tps:.2f}", f"Diff Total: {diff_total}"]
    return Report(data, [table], lines)


async def _consumer_connection(target: Target, group: str) -> ConsumerConnection:
    refusals = []
    for broker in await masters(target):
        async with connect(target, broker.address) as conn:
            try:
                return await calls.get_consumer_connections(conn, group)
            except SendError as exc:
                if exc.code != ResponseCode.CONSUMER_NOT_ONLINE:
                    raise
                refusals.append(label(broker))
    raise AdminError(f"group {group!r} has no live consumer (asked {', '.join(refusals)})")


@click.option("-g", "--consumerGroup", "group", required=True, help="Consumer group.")
async def consumer_connection(target: Target, group: str) -> Report:
    """A group's live consumers: client id, address, language, version; its subscription."""
    cc = await _consumer_connection(target, group)
    clients = Table(["ClientId", "ClientAddr", "Language", "Version"])
    for c in sorted(cc.connections, key=lambda c: c.client_id):
        clients.add(c.client_id, c.client_addr, c.language, c.version)
    subscriptions = Table(["Topic", "SubExpression"], title="Below is subscription:")
    for topic, sub in sorted(cc.subscriptions.items()):
        subscriptions.add(topic, sub.sub_string)
    data = {
        "group": group,
        "connections": [c.to_json() for c in cc.connections],
        "subscriptions": {t: s.sub_string for t, s in sorted(cc.subscriptions.items())},
        "consumeType": cc.consume_type,
        "messageModel": cc.message_model,
        "consumeFromWhere": cc.consume_from_where,
    }
    lines = [
        f"ConsumeType: {cc.consume_type}",
        f"MessageModel: {cc.message_model}",
        f"ConsumeFromWhere: {cc.consume_from_where}",
    ]
    return Report(data, [clients, subscriptions], lines)


@click.option("-g", "--producerGroup", "group", required=True, help="Producer group.")
@click.option("-t", "--topic", required=True, help="A topic the group sends to.")
async def producer_connection(target: Target, group: str, topic: str) -> Report:
    """A producer group's live connections, found through the topic's brokers."""
    brokers = [BrokerAt("", target.broker)] if target.broker else None
    for broker in brokers or route_masters(await topic_route(target, topic)):
        async with connect(target, broker.address) as conn:
            try:
                pc = await calls.get_producer_connections(conn, group)
            except SendError as exc:
                if exc.code != ResponseCode.SYSTEM_ERROR:
                    raise
                continue
        table = Table(["#", "ClientId", "ClientAddr", "Language", "Version"])
        conns = sorted(pc.connections, key=lambda c: c.client_id)
        for index, c in enumerate(conns, 1):
            table.add(f"{index:04d}", c.client_id, c.client_addr, c.language, c.version)
        data = {
            "group": group,
            "broker": str(broker.address),
            "connections": [c.to_json() for c in conns],
        }
        return Report(data, [table])
    raise AdminError(f"producer group {group!r} has no live connection on the brokers of {topic!r}")


def parse_timestamp(text: str) -> int:
    """mqadmin's -s: `now`, milliseconds since the epoch, or local `yyyy-MM-dd#HH:mm:ss:SSS`."""
    if text == "now":
        return int(time.time() * 1000)
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f")
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not now, milliseconds, or yyyy-MM-dd#HH:mm:ss:SSS", param_hint="-s"
        ) from None
    return int(moment.timestamp() * 1000)


async def _reset_offline(
    target: Target, broker: BrokerAt, *, group: str, topic: str, ms: int, force: bool
) -> dict[MessageQueue, int]:
    """No live consumer: each queue's offset found by time and committed (mqadmin's way)."""
    moved: dict[MessageQueue, int] = {}
    async with connect(target, broker.address) as conn:
        stats = await calls.get_consume_stats(conn, group, topic)
        if not stats.offset_table:
            raise AdminError(f"group {group!r} has no offset on topic {topic!r}")
        worker = PullConsumer(conn, group, ADMIN_CLIENT_ID)
        for mq, w in sorted(stats.offset_table.items()):
            offset = await worker.offset_by_time(mq.topic, mq.queue_id, ms)
            if force or offset < w.consumer_offset:
                await worker.commit(mq.topic, mq.queue_id, offset)
                moved[mq] = offset
            else:
                moved[mq] = w.consumer_offset
    return moved


@click.option("-g", "--group", required=True, help="Consumer group.")
@click.option("-t", "--topic", required=True, help="Topic.")
@click.option("-s", "--timestamp", "when", required=True, help="now | ms | yyyy-MM-dd#HH:mm:ss:SSS")
@click.option("-f", "--force", type=click.BOOL, default=True, help="Also move forward.")
@click.option("-c", "--cplus", is_flag=True, hidden=True)  # the broker tells C++ clients anyway
async def reset_offset_by_time(  # noqa: PLR0917 (click passes every option)
    target: Target, group: str, topic: str, when: str, force: bool, cplus: bool
) -> Report:
    """Move a group's offsets of a topic to the first message stored at or after a time; live
    consumers are told to go there too (C++ clients in the form they read: mqadmin's -c is
    accepted and not needed)."""
    del cplus
    ms = parse_timestamp(when)
    brokers = [BrokerAt("", target.broker)] if target.broker else None
    table = Table(["brokerName", "queueId", "offset"])
    rows = []
    for broker in brokers or route_masters(await topic_route(target, topic)):
        async with connect(target, broker.address) as conn:
            try:
                moved = await calls.reset_offset_by_time(conn, topic, group, ms, force=force)
                offsets = moved.offset_table
            except SendError as exc:
                if exc.code != ResponseCode.CONSUMER_NOT_ONLINE:
                    raise
                offsets = {}
        if not offsets:
            offsets = await _reset_offline(
                target, broker, group=group, topic=topic, ms=ms, force=force
            )
        for mq, offset in sorted(offsets.items()):
            table.add(mq.broker_name, mq.queue_id, offset)
            rows.append({"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": offset})
    if not rows:
        raise AdminUsageError(f"topic {topic!r} has no broker to reset on")
    head = (
        f"rollback consumer offset by specified group[{group}], topic[{topic}], "
        f"force[{str(force).lower()}], timestamp(string)[{when}], timestamp(long)[{ms}]"
    )
    data = {"group": group, "topic": topic, "timestamp": ms, "force": force, "queues": rows}
    return Report(data, [Table(table.columns, table.rows, title=head)])


COMMANDS = [
    admin_command("updateSubGroup")(update_sub_group),
    admin_command("deleteSubGroup")(delete_sub_group),
    admin_command("consumerProgress")(consumer_progress),
    admin_command("consumerConnection")(consumer_connection),
    admin_command("producerConnection")(producer_connection),
    admin_command("resetOffsetByTime", cluster=False)(reset_offset_by_time),
]
