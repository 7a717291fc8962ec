"""Command-line interface of rmq-broker."""

import click

from broker import __version__


@click.group()
@click.version_option(__version__, prog_name="rmq-broker")
def main() -> None:
    """A RocketMQ-compatible message broker."""
