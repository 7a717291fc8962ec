"""What every `rmq-broker admin` command shares: the flags naming a name server (`-n`, or the
NAMESRV_ADDR variable as mqadmin reads it), a broker (`-b`) or a cluster (`-c`); ACL keys;
`--timeout` and `--json`; connections whose failures become one line naming the address; and
the run that turns any failure into one line on stderr and an exit code.

Exit codes: 0 done; 1 the request failed (unreachable, refused, nothing found, a broker of
several failed); 2 bad usage (a wrong flag or value: click's own, or found while running).
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import IO, Any, Final, TypeAlias

import click
import trio

from broker.admin_cli.output import Report, render
from broker.config import ConfigError, HostPort
from protocol.acl_signing import SessionCredentials
from protocol.errors import RemotingProtocolError
from protocol.fastjson import FastjsonError
from protocol.route import ClusterInfo, TopicRouteData
from rmq_client.admin import ADMIN_GROUP, AdminClient
from rmq_client.producer import (
    UNREACHABLE,
    Producer,
    RequestTimeoutError,
    SendError,
    open_producer,
)
from rmq_client.query import QueryError

MASTER_ID: Final = 0

AdminFunction: TypeAlias = Callable[..., Awaitable[Report]]


class AdminError(Exception):
    """A request that failed; the message is the operator's line."""


class AdminUsageError(AdminError):
    """Flags that cannot work together, found while running (exit code 2)."""


@dataclass(frozen=True, slots=True)
class Target:
    namesrv: HostPort | None
    broker: HostPort | None
    cluster: str | None
    credentials: SessionCredentials | None
    timeout_s: float
    as_json: bool

    def require_namesrv(self) -> HostPort:
        if self.namesrv is None:
            raise AdminUsageError("no name server: give -n HOST:PORT (or set NAMESRV_ADDR)")
        return self.namesrv


@dataclass(frozen=True, slots=True)
class BrokerAt:
    """A broker to ask: its name ("" when named only by -b) and its address."""

    name: str
    address: HostPort


def parse_address(value: str, flag: str) -> HostPort:
    try:
        return HostPort.parse(flag, value)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


def listed_address(text: str) -> HostPort:
    """A broker address the name server gave; `AdminError` when it is not HOST:PORT."""
    try:
        return HostPort.parse("brokerAddr", text)
    except ConfigError as exc:
        raise AdminError(f"the name server lists a bad broker address: {exc}") from None


def _target(
    *,
    namesrv_addr: str | None,
    broker_addr: str | None,
    cluster_name: str | None,
    access_key: str | None,
    secret_key: str | None,
    timeout_s: float,
    as_json: bool,
) -> Target:
    if (access_key is None) != (secret_key is None):
        raise click.UsageError("--access-key and --secret-key go together")
    if not 0 < timeout_s < float("inf"):
        raise click.BadParameter(f"{timeout_s!r} is not a positive number of seconds")
    credentials = (
        SessionCredentials(access_key, secret_key)
        if access_key is not None and secret_key is not None
        else None
    )
    return Target(
        parse_address(namesrv_addr, "-n") if namesrv_addr else None,
        parse_address(broker_addr, "-b") if broker_addr else None,
        cluster_name,
        credentials,
        timeout_s,
        as_json,
    )


class OneLineUsageError(click.UsageError):
    """A usage error shown as one line (`rmq-broker: admin CMD: problem`), no usage text."""

    def __init__(self, message: str, command: str) -> None:
        super().__init__(message)
        self.command = command

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"rmq-broker: admin {self.command}: {self.format_message()}", err=True)


class AdminCommand(click.Command):
    """A command whose bad flags and values are one line on stderr (exit code 2)."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise OneLineUsageError(exc.format_message(), self.name or "") from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise OneLineUsageError(exc.format_message(), self.name or "") from None


class AdminGroup(click.Group):
    """The `admin` group: an unknown command is one line too."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            raise OneLineUsageError(exc.format_message(), args[0] if args else "") from None


def admin_command(
    name: str, *, broker: bool = True, cluster: bool = True
) -> Callable[[AdminFunction], click.Command]:
    """A click command named `name` running `fn(target, **its own options)`; adds -n (and -b,
    -c unless the command uses those letters otherwise), the ACL keys, --timeout and --json."""

    def decorate(fn: AdminFunction) -> click.Command:
        def callback(**kwargs: Any) -> None:
            target = _target(
                namesrv_addr=kwargs.pop("namesrv_addr"),
                broker_addr=kwargs.pop("broker_addr", None),
                cluster_name=kwargs.pop("cluster_name", None),
                access_key=kwargs.pop("access_key"),
                secret_key=kwargs.pop("secret_key"),
                timeout_s=kwargs.pop("timeout_s"),
                as_json=kwargs.pop("as_json"),
            )
            execute(name, functools.partial(fn, target, **kwargs), target.as_json)

        params = list(getattr(fn, "__click_params__", []))
        callback.__click_params__ = params  # type: ignore[attr-defined]
        shared = [
            click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON."),
            click.option("--timeout", "timeout_s", default=10.0, show_default=True, type=float),
            click.option("--secret-key", default=None, help="With --access-key."),
            click.option("--access-key", default=None, help="ACL account (admin for changes)."),
        ]
        if cluster:
            shared.append(
                click.option(
                    "-c",
                    "--clusterName",
                    "cluster_name",
                    default=None,
                    help="With -n: the master brokers of this cluster.",
                )
            )
        if broker:
            shared.append(
                click.option(
                    "-b", "--brokerAddr", "broker_addr", default=None, help="HOST:PORT of a broker."
                )
            )
        shared.append(
            click.option(
                "-n",
                "--namesrvAddr",
                "namesrv_addr",
                envvar="NAMESRV_ADDR",
                default=None,
                help="HOST:PORT of a name server (a broker's port answers as one).",
            )
        )
        for option in shared:
            callback = option(callback)
        return click.command(name, cls=AdminCommand, help=inspect.getdoc(fn))(callback)

    return decorate


def execute(name: str, run: Callable[[], Awaitable[Report]], as_json: bool) -> None:
    """Run one command; print its report, or one line on stderr; exit with its code."""
    try:
        report = trio.run(run)
    except KeyboardInterrupt:
        click.echo(f"rmq-broker: admin {name}: interrupted", err=True)
        sys.exit(130)
    except BaseException as exc:  # one line whatever went wrong, never a traceback
        leaf = _leaf(exc)
        if isinstance(leaf, SystemExit):
            raise
        code, line = describe(leaf)
        click.echo(f"rmq-broker: admin {name}: {line}", err=True)
        sys.exit(code)
    render(report, as_json=as_json)
    for error in report.errors:
        click.echo(f"rmq-broker: admin {name}: {error}", err=True)
    sys.exit(1 if report.failed or report.errors else 0)


def _leaf(exc: BaseException) -> BaseException:
    """The exception a group wraps (Trio's nurseries wrap what their bodies raise)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> tuple[int, str]:
    """The exit code and line for a failure."""
    if isinstance(exc, AdminUsageError):
        return 2, str(exc)
    if isinstance(exc, click.UsageError):
        return 2, exc.format_message()
    if isinstance(exc, AdminError):
        return 1, str(exc)
    if isinstance(exc, SendError | QueryError):
        return 1, f"refused: {exc}"
    if isinstance(exc, UNREACHABLE):
        return 1, f"unreachable: {_text(exc)}"
    return 1, f"unexpected {type(exc).__name__}: {_text(exc)}".replace("\n", " ")


def _text(exc: BaseException) -> str:
    if isinstance(exc, trio.TooSlowError):
        return "no answer in time"
    return (str(exc) or type(exc).__name__).replace("\n", " ")


@asynccontextmanager
async def connect(
    target: Target, address: HostPort, role: str = "broker"
) -> AsyncIterator[Producer]:
    """A connection to `address`; within the block a failure becomes an `AdminError` naming
    the address (unreachable, no answer within --timeout, or refused with code and remark)."""
    try:
        with trio.fail_after(target.timeout_s):
            async with open_producer(
                address.host,
                address.port,
                group=ADMIN_GROUP,
                timeout_s=target.timeout_s,
                credentials=target.credentials,
            ) as conn:
                yield conn
    except BaseException as exc:
        leaf = _leaf(exc)
        if isinstance(leaf, AdminError):
            raise leaf from None
        if isinstance(leaf, SendError | QueryError):
            raise AdminError(f"{role} {address} refused: {leaf}") from None
        if isinstance(leaf, RemotingProtocolError | FastjsonError):
            raise AdminError(f"{role} {address} answered badly: {_text(leaf)}") from None
        if isinstance(leaf, trio.TooSlowError | RequestTimeoutError):
            raise AdminError(
                f"{role} {address} did not answer within {target.timeout_s:g} s"
            ) from None
        if isinstance(leaf, UNREACHABLE):
            raise AdminError(f"{role} {address} unreachable: {_text(leaf)}") from None
        raise


async def cluster_info(target: Target) -> ClusterInfo:
    namesrv = target.require_namesrv()
    async with connect(target, namesrv, "name server") as conn:
        return await conn.get_cluster_info()


async def topic_route(target: Target, topic: str) -> TopicRouteData:
    """The topic's route from the name server (-n), or from the broker (-b) when no -n."""
    address = target.namesrv or target.broker
    if address is None:
        target.require_namesrv()
    assert address is not None
    async with connect(target, address, "name server") as conn:
        # with auto-creation on, a route comes back for any name: ask for the known ones first
        if topic not in await AdminClient(conn).all_topics():
            raise AdminError(
                f"topic {topic!r} does not exist (the name server {address} has no route)"
            )
        try:
            return await conn.get_route(topic)
        except SendError as exc:
            raise AdminError(f"topic {topic!r} has no route: {exc.remark or exc}") from None


async def masters(target: Target, *, slaves: bool = False) -> list[BrokerAt]:
    """The brokers a command acts on: -b's; else the masters (with `slaves` every broker) of
    -c's cluster (of every cluster without -c) from the name server."""
    if target.broker is not None:
        return [BrokerAt("", target.broker)]
    info = await cluster_info(target)
    if target.cluster is not None and target.cluster not in info.cluster_addr_table:
        raise AdminError(f"cluster {target.cluster!r} is unknown to the name server")
    names = (
        info.cluster_addr_table[target.cluster]
        if target.cluster is not None
        else [n for c in sorted(info.cluster_addr_table) for n in info.cluster_addr_table[c]]
    )
    found = []
    for broker_name in sorted(set(names)):
        data = info.broker_addr_table.get(broker_name)
        for broker_id, addr in sorted(data.broker_addrs.items() if data else ()):
            if slaves or broker_id == MASTER_ID:
                found.append(BrokerAt(broker_name, listed_address(addr)))
    if not found:
        raise AdminError("the name server lists no broker")
    return found


async def on_each(
    target: Target,
    brokers: list[BrokerAt],
    report: Report,
    act: Callable[[Producer], Awaitable[object]],
    done: Callable[[HostPort], str],
) -> None:
    """Make one change on every broker: a line for each that made it (`report.lines`, the
    address in `report.data["brokers"]`), one for each that failed (`report.errors`). With a
    single broker its failure is the command's failure."""
    for broker in brokers:
        try:
            async with connect(target, broker.address) as conn:
                await act(conn)
        except AdminError as exc:
            if len(brokers) == 1:
                raise
            report.errors.append(str(exc))
            continue
        report.data["brokers"].append(str(broker.address))
        report.lines.append(done(broker.address))


def route_masters(route: TopicRouteData) -> list[BrokerAt]:
    return [
        BrokerAt(b.broker_name, listed_address(b.broker_addrs[MASTER_ID]))
        for b in sorted(route.broker_datas, key=lambda b: b.broker_name)
        if MASTER_ID in b.broker_addrs
    ]


def label(broker: BrokerAt) -> str:
    return broker.name or str(broker.address)
