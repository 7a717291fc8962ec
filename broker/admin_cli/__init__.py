"""`rmq-broker admin COMMAND`: operate running brokers with mqadmin's command and flag names.

One module per area (topics, groups, brokers and clusters, messages); `common` holds the flags
every command shares, the connections and the errors, `output` the tables and `--json`.
"""

from __future__ import annotations

import click

from broker.admin_cli import brokers, groups, messages, topics
from broker.admin_cli.common import AdminGroup


@click.group(cls=AdminGroup)
def admin() -> None:
    """Operate running brokers (mqadmin's command and flag names; -n HOST:PORT names the name
    server, a broker's port answers as one). Tables on a terminal, tab-separated text in a
    pipe, --json for scripts. Exit code 0 done, 1 failed, 2 bad usage."""


for _module in (topics, groups, brokers, messages):
    for _command in _module.COMMANDS:
        admin.add_command(_command)
