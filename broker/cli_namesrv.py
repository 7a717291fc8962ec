"""`rmq-broker namesrv`: the standalone name server in the foreground.

Owns the flags, exit codes and logging setup; the work lives in `namesrv.server`. The first
SIGTERM or SIGINT starts a graceful shutdown (exit 0), a second one exits at once. A flag or
KV config file that cannot be used is one line on stderr (exit 2); an address that cannot be
bound, one line too (exit 1).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import click
import structlog
import trio

from broker.config import ConfigError, HostPort

EXIT_CONFIG_ERROR = 2
EXIT_SECOND_SIGNAL = 130


@click.command()
@click.option("--listen", default="127.0.0.1:9876", show_default=True, help="HOST:PORT to serve.")
@click.option("--kv-config-path", default=None, help="KV config file (~/namesrv/kvConfig.json).")
@click.option(
    "--broker-expired-s",
    type=click.FloatRange(min=0, min_open=True),
    default=120.0,
    show_default=True,
    help="Seconds without a registration after which a broker leaves the routes.",
)
@click.option(
    "--scan-interval-s",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds between two looks for expired brokers.",
)
@click.option("--max-brokers", type=click.IntRange(min=1), default=1024, show_default=True)
@click.option("--order-message-enable", is_flag=True, help="Routes carry ORDER_TOPIC_CONFIG.")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default=lambda: os.environ.get("RMQ_LOG_LEVEL", "info"),
    help="Default $RMQ_LOG_LEVEL or info.",
)
def namesrv(  # noqa: PLR0917 (click passes every option)
    listen: str,
    kv_config_path: str | None,
    broker_expired_s: float,
    scan_interval_s: float,
    max_brokers: int,
    order_message_enable: bool,
    log_level: str,
) -> None:
    """Run a RocketMQ 4.9 name server in the foreground until SIGTERM or SIGINT."""
    from namesrv.config import NamesrvConfig, NamesrvConfigError, default_kv_config_path
    from namesrv.kvconfig import KVConfigError

    try:
        address = HostPort.parse("--listen", listen)
        config = NamesrvConfig(
            listen_host=address.host,
            listen_port=address.port,
            kv_config_path=kv_config_path or default_kv_config_path(),
            order_message_enable=order_message_enable,
            broker_expired_s=broker_expired_s,
            scan_interval_s=scan_interval_s,
            max_brokers=max_brokers,
            log_level=log_level.lower(),
        )
    except (ConfigError, NamesrvConfigError) as exc:
        click.echo(f"rmq-broker: configuration error: {exc}", err=True)
        sys.exit(EXIT_CONFIG_ERROR)
    from broker.logging import configure_logging

    configure_logging(config.log_level)
    config_failures: list[BaseException] = []
    failures: list[BaseException] = []
    try:
        trio.run(_serve_until_signalled, config)
    except* KVConfigError as group:
        config_failures.extend(group.exceptions)
    except* OSError as group:
        failures.extend(group.exceptions)  # the listen address cannot be bound
    for failure in config_failures:
        click.echo(f"rmq-broker: configuration error: {failure}", err=True)
    for failure in failures:
        click.echo(f"rmq-broker: cannot start: {failure}", err=True)
    if config_failures or failures:
        sys.exit(EXIT_CONFIG_ERROR if config_failures else 1)


async def _serve_until_signalled(config: Any) -> None:
    from broker.refusals import RefusalLog
    from namesrv.server import NamesrvServer, serve

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            started: list[NamesrvServer] = []

            async def run(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                # The broker's refusal log: one event per refused request, rate limited.
                refusals = RefusalLog().refused
                await serve(config, refusals=refusals, task_status=task_status)
                nursery.cancel_scope.cancel()  # served and shut down: stop watching signals

            async def watch() -> None:
                count = 0
                async for signum in signals:
                    count += 1
                    if count > 1:
                        os._exit(EXIT_SECOND_SIGNAL)
                    structlog.get_logger().info(
                        "signal_received", signal=signal.Signals(signum).name
                    )
                    if started:
                        started[0].shutdown()
                    else:
                        nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            started.append(await nursery.start(run))
