"""Command-line interface of rmq-broker: `serve`, `inspect`, `query`, `send`, `health`, `admin`,
`namesrv` (and `pipeline`).

Owns flags, exit codes and output; the work lives in `broker.server`, `store.reader` and
`rmq_client.producer`. `serve` runs in the foreground: the first SIGTERM or SIGINT starts a graceful
shutdown (exit 0 once the store is closed), a second one exits at once. Configuration errors
are one line on stderr, never a traceback. The `pipeline` group (Spark jobs) is loaded from
`broker.cli_pipeline` when that module is present.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import signal
import sys
from collections.abc import Mapping
from functools import partial
from typing import Any, ClassVar, NoReturn

import click
import structlog
import trio

from broker import __version__
from broker.config import BrokerConfig, ConfigError, HostPort, load_config
from store.config import MessageStoreConfig
from store.errors import StoreError

EXIT_CONFIG_ERROR = 2
EXIT_SECOND_SIGNAL = 130
#: the largest body `send` builds: what a broker on default settings accepts
MAX_BODY_SIZE = MessageStoreConfig().max_message_size


class _Seconds(click.ParamType[float]):
    """A finite, positive number of seconds."""

    name = "seconds"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not (math.isfinite(seconds) and seconds > 0):
            self.fail(f"{value!r} is not a positive number of seconds", param, ctx)
        return seconds


_SECONDS = _Seconds()


def _addr(value: str, name: str) -> HostPort:
    try:
        return HostPort.parse(name, value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from None


class _LazyGroup(click.Group):
    """Subcommands kept in other modules are imported when named (or listed by --help), so
    that `serve` does not pay for the admin tables, rich and the client package at startup."""

    #: command name -> "module:attribute"
    lazy: ClassVar[Mapping[str, str]] = {
        "admin": "broker.admin_cli:admin",
        "query": "broker.cli_query:query",
        "namesrv": "broker.cli_namesrv:namesrv",
        "pipeline": "broker.cli_pipeline:pipeline",
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module, _, attr = self.lazy[cmd_name].partition(":")
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command), command
        self.add_command(command, cmd_name)
        return command


@click.group(cls=_LazyGroup)
@click.version_option(__version__, prog_name="rmq-broker")
def main() -> None:
    """A RocketMQ-compatible message broker."""


@main.command()
@click.option(
    "--listen", default=None, help="HOST:PORT of the broker port (default 0.0.0.0:10911)."
)
@click.option("--store-dir", default=None, help="Store root directory (commitlog/, config/, ...).")
@click.option(
    "--flush-disk-type",
    type=click.Choice(["SYNC_FLUSH", "ASYNC_FLUSH"], case_sensitive=False),
    default=None,
)
@click.option("--config", "config_file", default=None, help="TOML file (or $RMQ_CONFIG).")
@click.option("--namesrv-listen", default=None, help="Extra HOST:PORT answering name-server calls.")
@click.option("--metrics-listen", default=None, help="HOST:PORT of the Prometheus /metrics page.")
@click.option(
    "--grpc-listen",
    default=None,
    help="HOST:PORT of the RocketMQ 5 gRPC endpoint (default 127.0.0.1:8081; none: off).",
)
@click.option(
    "-n", "--namesrv-addr", default=None, help="Name servers to register with, HOST:PORT;..."
)
@click.option("--broker-name", default=None, help="The broker group's name (default broker-a).")
def serve(  # noqa: PLR0917 (click passes every option)
    listen: str | None,
    store_dir: str | None,
    flush_disk_type: str | None,
    config_file: str | None,
    namesrv_listen: str | None,
    metrics_listen: str | None,
    grpc_listen: str | None,
    namesrv_addr: str | None,
    broker_name: str | None,
) -> None:
    """Run the broker in the foreground until SIGTERM or SIGINT."""
    flags = {
        "namesrv_addr": namesrv_addr,
        "broker_name": broker_name,
        "listen": listen,
        "store_path_root_dir": store_dir,
        "flush_disk_type": flush_disk_type,
        "namesrv_listen": namesrv_listen,
        "metrics_listen": metrics_listen,
        "grpc_listen": grpc_listen,
    }
    try:
        config = load_config(config_file, flags)
    except ConfigError as exc:
        click.echo(f"rmq-broker: configuration error: {exc}", err=True)
        sys.exit(EXIT_CONFIG_ERROR)
    from broker.logging import configure_logging

    configure_logging(config.log_level)
    failures: list[BaseException] = []
    config_failures: list[BaseException] = []
    try:
        trio.run(_serve_until_signalled, config)
    except* ConfigError as group:
        # unusable ACL or TLS files, found when they are loaded at startup
        config_failures.extend(_leaves(group))
    except* (OSError, StoreError) as group:
        # A bound port, a locked or damaged store: one clear line each, no traceback.
        failures.extend(_leaves(group))
    for failure in config_failures:
        click.echo(f"rmq-broker: configuration error: {failure}", err=True)
    for failure in failures:
        click.echo(f"rmq-broker: cannot start: {failure}", err=True)
    if config_failures:
        sys.exit(EXIT_CONFIG_ERROR)
    if failures:
        sys.exit(1)


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    leaves: list[BaseException] = []
    for exc in group.exceptions:
        leaves.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return leaves


async def _serve_until_signalled(config: BrokerConfig, signals: Any = None) -> None:
    """Serve until a signal. A signal before the broker listens (during recovery, say) stops the
    startup: nothing has been acknowledged, and recovery stops where the next start redoes it."""
    from broker.server import BrokerServer
    from broker.server import serve as serve_broker

    with contextlib.ExitStack() as stack:
        if signals is None:
            signals = stack.enter_context(trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT))
        async with trio.open_nursery() as nursery:
            started: list[BrokerServer] = []

            def shutdown() -> None:
                if started:
                    started[0].shutdown()
                else:
                    structlog.get_logger().info("startup_abandoned")
                    nursery.cancel_scope.cancel()

            async def run_server(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                await serve_broker(config, task_status=task_status)
                # The broker has shut down: the signal watcher must not keep the process alive.
                nursery.cancel_scope.cancel()

            nursery.start_soon(_watch_signals, signals, shutdown)
            started.append(await nursery.start(run_server))


async def _watch_signals(signals: Any, shutdown: Any) -> None:
    count = 0
    async for signum in signals:
        count += 1
        if count == 1:
            structlog.get_logger().info("signal_received", signal=signal.Signals(signum).name)
            shutdown()
        else:
            os._exit(EXIT_SECOND_SIGNAL)  # a second signal: stop now, recovery will repair


@main.command()
@click.option("--store-dir", required=True, type=click.Path(file_okay=False, exists=True))
@click.option("--from-offset", default=None, type=click.IntRange(min=0), help="Physical offset.")
@click.option("--topic", default=None, help="Only records of this topic.")
@click.option("--body", "with_body", is_flag=True, help="Add the body (base64) to each line.")
@click.option("--limit", default=None, type=click.IntRange(min=1), help="Stop after N records.")
def inspect(
    store_dir: str, from_offset: int | None, topic: str | None, with_body: bool, limit: int | None
) -> None:
    """Print the commit log's records up to the durable offset, one JSON object per line."""
    from broker.inspect import inspect_store
    from store.decode import RecordFormatError

    if not os.path.isdir(os.path.join(store_dir, "commitlog")):
        _inspect_failed(f"{store_dir} is not a store (no commitlog directory)")
    emitted = 0

    def emit(line: str) -> None:
        nonlocal emitted
        click.echo(line)
        emitted += 1

    try:
        inspect_store(
            store_dir,
            from_offset=from_offset,
            topic=topic,
            with_body=with_body,
            limit=limit,
            emit=emit,
        )
    except RecordFormatError as exc:
        _inspect_failed(
            f"damaged record at offset {exc.offset}: {exc.reason} ({emitted} before it)"
        )
    except OSError as exc:
        _inspect_failed(f"cannot read {exc.filename or store_dir}: {exc.strerror or exc}")
    click.echo(f"{emitted} records", err=True)


def _inspect_failed(message: str) -> NoReturn:
    click.echo(f"rmq-broker: inspect: {message}", err=True)
    sys.exit(1)


@main.command()
@click.option("--namesrv", required=True, help="HOST:PORT of the name server (or the broker).")
@click.option("--topic", required=True)
@click.option("--count", default=1, type=click.IntRange(min=1), show_default=True)
@click.option(
    "--size",
    default=128,
    type=click.IntRange(min=0, max=MAX_BODY_SIZE),
    show_default=True,
    help="Body bytes (at most the broker's default max_message_size).",
)
@click.option("--concurrency", default=32, type=click.IntRange(min=1), show_default=True)
@click.option("--tags", default=None)
@click.option(
    "--timeout",
    "timeout_s",
    default=10.0,
    show_default=True,
    type=_SECONDS,
    help="Seconds to reach the name server and the broker, and for each send.",
)
def send(  # noqa: PLR0917 (click passes every option)
    namesrv: str,
    topic: str,
    count: int,
    size: int,
    concurrency: int,
    tags: str | None,
    timeout_s: float,
) -> None:
    """Send COUNT messages of SIZE bytes and print a JSON summary."""
    from rmq_client.quick_send import QuickSendError, run_quick_send

    address = _addr(namesrv, "--namesrv")
    try:
        ok = trio.run(
            partial(
                run_quick_send,
                address.host,
                address.port,
                topic,
                count=count,
                size=size,
                concurrency=concurrency,
                tags=tags,
                timeout_s=timeout_s,
            )
        )
    except QuickSendError as exc:
        click.echo(f"rmq-broker: send: {exc}", err=True)
        sys.exit(1)
    sys.exit(0 if ok else 1)


@main.command()
@click.option("--addr", required=True, help="HOST:PORT of the broker.")
@click.option("--timeout", "timeout_s", default=3.0, show_default=True, type=_SECONDS)
def health(addr: str, timeout_s: float) -> None:
    """Exit 0 when the broker answers GET_BROKER_CLUSTER_INFO correctly, 1 otherwise."""
    from rmq_client.quick_send import check_health

    address = _addr(addr, "--addr")
    problem = trio.run(check_health, address.host, address.port, timeout_s)
    if problem:
        click.echo(f"unhealthy: {problem}", err=True)
        sys.exit(1)
    click.echo("ok")
