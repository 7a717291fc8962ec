"""`rmq-broker admin COMMAND`: operations on running brokers, with mqadmin's command and flag
names (`deleteExpiredCommitLog -b ADDR`), over the remoting protocol.

Owns flags, output and exit codes: each broker asked gets one line (`ADDR: success`, or what
went wrong), and the exit code is 0 only when every broker answered SUCCESS. Brokers are named
by address (`-b`), or found through a name server (`-n`) by cluster (`-c`, all clusters when
absent), as mqadmin finds them.
"""

from __future__ import annotations

import sys
from functools import partial

import click
import trio

from broker.acl.signing import SessionCredentials
from broker.client import UNREACHABLE, SendError, open_producer
from broker.config import ConfigError, HostPort
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand


class AdminError(Exception):
    """A broker or name server that could not be asked; the message is the operator's line."""


@click.group()
def admin() -> None:
    """Operate running brokers (mqadmin's command and flag names)."""


def _address(value: str, flag: str) -> HostPort:
    try:
        return HostPort.parse(flag, value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from None


@admin.command("deleteExpiredCommitLog")
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="HOST:PORT of one broker.")
@click.option(
    "-n", "--namesrvAddr", "namesrv_addr", default=None, help="HOST:PORT of a name server."
)
@click.option("-c", "--cluster", default=None, help="With -n: the cluster (default: every one).")
@click.option("--access-key", default=None, help="ACL account of an admin (with --secret-key).")
@click.option("--secret-key", default=None)
@click.option("--timeout", "timeout_s", default=10.0, show_default=True, type=float)
def delete_expired_commit_log(  # noqa: PLR0917 (click passes every option)
    broker_addr: str | None,
    namesrv_addr: str | None,
    cluster: str | None,
    access_key: str | None,
    secret_key: str | None,
    timeout_s: float,
) -> None:
    """Delete expired commit-log segments now (TRIGGER_DELETE_FILES): each broker runs a
    cleanup round at once, and expired segments go at any hour in the rounds that follow."""
    if (broker_addr is None) == (namesrv_addr is None):
        raise click.UsageError("give either -b BROKER_ADDR or -n NAMESRV_ADDR [-c CLUSTER]")
    if (access_key is None) != (secret_key is None):
        raise click.UsageError("--access-key and --secret-key go together")
    if not 0 < timeout_s < float("inf"):
        raise click.BadParameter(f"{timeout_s!r} is not a positive number of seconds")
    credentials = (
        SessionCredentials(access_key, secret_key)
        if access_key is not None and secret_key is not None
        else None
    )
    ask = partial(_ask_all, credentials=credentials, timeout_s=timeout_s)
    try:
        if broker_addr is not None:
            lines = trio.run(ask, [_address(broker_addr, "-b")])
        else:
            assert namesrv_addr is not None
            namesrv = _address(namesrv_addr, "-n")
            brokers = trio.run(_cluster_brokers, namesrv, cluster, credentials, timeout_s)
            lines = trio.run(ask, brokers)
    except AdminError as exc:
        click.echo(f"rmq-broker: admin: {exc}", err=True)
        sys.exit(1)
    failed = False
    for address, problem in lines:
        click.echo(f"{address}: {problem or 'success'}")
        failed |= problem is not None
    sys.exit(1 if failed else 0)


async def _ask_all(
    brokers: list[HostPort], *, credentials: SessionCredentials | None, timeout_s: float
) -> list[tuple[HostPort, str | None]]:
    results = []
    for address in brokers:
        request = RemotingCommand.request(RequestCode.TRIGGER_DELETE_FILES)
        results.append((address, await _problem(address, request, credentials, timeout_s)))
    return results


async def _problem(
    address: HostPort,
    request: RemotingCommand,
    credentials: SessionCredentials | None,
    timeout_s: float,
) -> str | None:
    """None when the broker answered SUCCESS, else what went wrong, in one line."""
    try:
        with trio.fail_after(timeout_s):
            async with open_producer(
                address.host, address.port, timeout_s=timeout_s, credentials=credentials
            ) as client:
                response = await client.request(request)
    except UNREACHABLE as exc:
        return f"unreachable: {str(exc) or type(exc).__name__}"
    if response.code != ResponseCode.SUCCESS:
        return f"refused: code {response.code}: {response.remark or ''}".rstrip(": ")
    return None


async def _cluster_brokers(
    namesrv: HostPort,
    cluster: str | None,
    credentials: SessionCredentials | None,
    timeout_s: float,
) -> list[HostPort]:
    """The addresses of every broker of `cluster` (of every cluster when None)."""
    try:
        with trio.fail_after(timeout_s):
            async with open_producer(
                namesrv.host, namesrv.port, timeout_s=timeout_s, credentials=credentials
            ) as client:
                info = await client.get_cluster_info()
    except UNREACHABLE as exc:
        raise AdminError(
            f"name server {namesrv} unreachable: {str(exc) or type(exc).__name__}"
        ) from None
    except SendError as exc:
        raise AdminError(f"name server {namesrv} refused: {exc}") from None
    if cluster is not None and cluster not in info.cluster_addr_table:
        raise AdminError(f"cluster {cluster!r} is unknown to the name server {namesrv}")
    clusters = [cluster] if cluster is not None else sorted(info.cluster_addr_table)
    addresses: list[HostPort] = []
    for name in clusters:
        for broker_name in info.cluster_addr_table[name]:
            data = info.broker_addr_table.get(broker_name)
            if data is None:
                continue
            for addr in data.broker_addrs.values():
                addresses.append(HostPort.parse("brokerAddr", addr))
    if not addresses:
        raise AdminError(f"the name server {namesrv} lists no broker")
    return addresses
