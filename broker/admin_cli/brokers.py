"""Brokers and clusters: clusterList, brokerStatus, getBrokerConfig, updateBrokerConfig and
deleteExpiredCommitLog, with mqadmin's names, flags and columns."""

from __future__ import annotations

import dataclasses
import time

import click

from broker.admin_cli.common import (
    AdminError,
    AdminUsageError,
    BrokerAt,
    Target,
    admin_command,
    cluster_info,
    connect,
    listed_address,
    on_each,
)
from broker.admin_cli.common import masters as brokers_of
from broker.admin_cli.output import Report, Table
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from rmq_client.admin import AdminClient


async def _runtime(target: Target, broker: BrokerAt) -> dict[str, str]:
    async with connect(target, broker.address) as conn:
        return await AdminClient(conn).runtime_info()


async def broker_status(target: Target) -> Report:
    """A broker's runtime figures (GET_BROKER_RUNTIME_INFO): versions, offsets, TPS, disk."""
    brokers = await brokers_of(target)
    data: dict[str, dict[str, str]] = {}
    table = Table(["Broker", "Key", "Value"] if len(brokers) > 1 else ["Key", "Value"])
    for broker in brokers:
        figures = data[str(broker.address)] = await _runtime(target, broker)
        for key, value in sorted(figures.items()):
            table.add(*([str(broker.address)] if len(brokers) > 1 else []), key, value)
    return Report(data, [table])


async def get_broker_config(target: Target) -> Report:
    """A broker's configuration (GET_BROKER_CONFIG), camelCase keys as in 4.9."""
    data: dict[str, dict[str, str]] = {}
    tables = []
    for broker in await brokers_of(target):
        async with connect(target, broker.address) as conn:
            config, _ = await AdminClient(conn).broker_config()
        data[str(broker.address)] = config
        table = Table(["Key", "Value"], title=f"============{broker.address}============")
        for key, value in sorted(config.items()):
            table.add(key, value)
        tables.append(table)
    return Report(data, tables)


@click.option("-k", "--key", required=True, help="Config key (camelCase, as getBrokerConfig).")
@click.option("-v", "--value", required=True, help="Its new value.")
async def update_broker_config(target: Target, key: str, value: str) -> Report:
    """Change a run-time setting of the brokers (kept across restarts); keys that cannot change
    at run time are refused with the broker's remark."""
    report = Report({"key": key, "value": value, "brokers": []})
    await on_each(
        target,
        await brokers_of(target),
        report,
        lambda conn: AdminClient(conn).update_broker_config({key: value}),
        lambda address: f"update broker config success, {address}",
    )
    return report


def _first(figures: dict[str, str], key: str) -> float:
    """The first number of a figure ("12.5 3.0 1.1" -> 12.5); 0 when absent."""
    try:
        return float(figures.get(key, "0").split()[0])
    except (IndexError, ValueError):
        return 0.0


async def cluster_list(target: Target) -> Report:
    """Every broker of every cluster (of -c's): address, version, in/out TPS, page-cache wait,
    hours of messages kept, disk use."""
    if target.namesrv is None and target.broker is not None:
        target = dataclasses.replace(target, namesrv=target.broker, broker=None)
    info = await cluster_info(target)
    if target.cluster is not None and target.cluster not in info.cluster_addr_table:
        raise AdminError(f"cluster {target.cluster!r} is unknown to the name server")
    columns = ["Cluster Name", "Broker Name", "BID", "Addr", "Version", "InTPS(LOAD)"]
    table = Table([*columns, "OutTPS(LOAD)", "PCWait(ms)", "Hour", "SPACE"])
    report = Report([], [table])
    now_ms = time.time() * 1000
    for cluster in sorted(info.cluster_addr_table):
        if target.cluster not in (None, cluster):
            continue
        for name in sorted(info.cluster_addr_table[cluster]):
            data = info.broker_addr_table.get(name)
            for broker_id, addr in sorted(data.broker_addrs.items() if data else ()):
                at = BrokerAt(name, listed_address(addr))
                try:
                    figures = await _runtime(target, at)
                except AdminError as exc:
                    report.failed = True
                    report.lines.append(str(exc))
                    figures = {}
                earliest = int(figures.get("earliestMessageTimeStamp", "0") or 0)
                row = {
                    "cluster": cluster,
                    "brokerName": name,
                    "brokerId": broker_id,
                    "addr": addr,
                    "version": figures.get("brokerVersionDesc", ""),
                    "inTps": _first(figures, "putTps"),
                    "outTps": _first(figures, "getTransferedTps"),
                    "pageCacheLockTimeMills": int(figures.get("pageCacheLockTimeMills", "0")),
                    "hour": (now_ms - earliest) / 3_600_000 if earliest > 0 else 0.0,
                    "space": float(figures.get("commitLogDiskRatio", "0") or 0),
                    "runtime": figures,
                }
                report.data.append(row)
                table.add(
                    cluster, name, broker_id, addr, row["version"],
                    f"{row['inTps']:.2f}({figures.get('sendThreadPoolQueueSize', 0)},"
                    f"{figures.get('sendThreadPoolQueueHeadWaitTimeMills', 0)}ms)",
                    f"{row['outTps']:.2f}({figures.get('pullThreadPoolQueueSize', 0)},"
                    f"{figures.get('pullThreadPoolQueueHeadWaitTimeMills', 0)}ms)",
                    row["pageCacheLockTimeMills"], f"{row['hour']:.2f}", f"{row['space']:.4f}",
                )  # fmt: skip
    return report


async def delete_expired_commit_log(target: Target) -> Report:
    """Delete expired commit-log segments now (TRIGGER_DELETE_FILES): each broker runs a
    cleanup round at once, and expired segments go at any hour in the rounds that follow.
    One line per broker; exit code 0 only when every broker answered SUCCESS."""
    if (target.broker is None) == (target.namesrv is None):
        raise AdminUsageError("give either -b BROKER_ADDR or -n NAMESRV_ADDR [-c CLUSTER]")
    report = Report({})
    for broker in await brokers_of(target, slaves=True):
        problem = None
        try:
            async with connect(target, broker.address) as conn:
                request = RemotingCommand.request(RequestCode.TRIGGER_DELETE_FILES)
                response = await conn.request(request)
            if response.code != ResponseCode.SUCCESS:
                problem = f"refused: code {response.code}: {response.remark or ''}".rstrip(": ")
        except AdminError as exc:
            problem = str(exc).replace(f"broker {broker.address} ", "", 1)
        report.data[str(broker.address)] = problem or "success"
        report.lines.append(f"{broker.address}: {problem or 'success'}")
        report.failed |= problem is not None
    return report


COMMANDS = [
    admin_command("clusterList")(cluster_list),
    admin_command("brokerStatus")(broker_status),
    admin_command("getBrokerConfig")(get_broker_config),
    admin_command("updateBrokerConfig")(update_broker_config),
    admin_command("deleteExpiredCommitLog")(delete_expired_commit_log),
]
