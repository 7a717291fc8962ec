"""`rmq-broker admin` as a real process: --json for a script, a rich table on a terminal
(a pseudo-terminal here), and a broker that is down: one line and exit code 1."""

from __future__ import annotations

import json
import os
import pathlib
import pty
import socket
import subprocess
import sys

import trio

from rmq_client.producer import Producer
from rmq_client.pull_consumer import open_pull_consumer
from tests.broker.cli_admin.support import send_per_queue
from tests.daemon import Daemon, run_cli

TOPIC, GROUP = "CliProcess", "cli_process"
SCRIPT = pathlib.Path(sys.executable).with_name("rmq-broker")


def on_terminal(*args: str) -> tuple[int, str]:
    """Run `rmq-broker admin ...` with stdout on a pseudo-terminal: exit code, what it showed."""
    main_fd, child_fd = pty.openpty()
    env = {**os.environ, "COLUMNS": "160", "TERM": "xterm"}
    process = subprocess.Popen(
        [str(SCRIPT), "admin", *args], stdout=child_fd, stderr=subprocess.PIPE, env=env
    )
    os.close(child_fd)
    chunks = []
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main_fd)
    code = process.wait(60)
    assert process.stderr is not None
    process.stderr.close()
    return code, b"".join(chunks).decode()


async def test_json_and_the_terminal_table_from_the_installed_command(
    daemon: Daemon, client: Producer
) -> None:
    await send_per_queue(client, TOPIC, (4, 2, 0, 1))
    async with open_pull_consumer("127.0.0.1", daemon.port, GROUP) as consumer:
        for queue_id in range(4):
            await consumer.commit(TOPIC, queue_id, 1 if queue_id < 2 else 0)
    here = f"127.0.0.1:{daemon.port}"
    args = ("consumerProgress", "-n", here, "-g", GROUP)
    with trio.fail_after(10):  # the consume queues are written after the send returns
        while True:
            done = await trio.to_thread.run_sync(
                lambda: subprocess.run(
                    [str(SCRIPT), "admin", *args, "--json"],
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                )
            )
            assert done.returncode == 0, done.stderr
            data = json.loads(done.stdout)
            if data["diffTotal"] == 5:
                break
            await trio.sleep(0.05)
    diffs = {q["queueId"]: q["diff"] for q in data["queues"]}
    assert diffs == {0: 3, 1: 1, 2: 0, 3: 1}

    code, shown = await trio.to_thread.run_sync(lambda: on_terminal(*args))
    assert code == 0
    assert "┃" in shown and "Broker Offset" in shown and "Consumer Offset" in shown
    assert "\t" not in shown  # a table, not the text for pipes
    assert "Diff Total: 5" in shown


def closed_port() -> int:
    with socket.socket() as sock:  # bound, never listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_broker_that_is_down_is_one_line_and_exit_1() -> None:
    port = closed_port()
    for args in (("consumerProgress", "-n", f"127.0.0.1:{port}", "-g", "g"),
                 ("consumerProgress", "-b", f"127.0.0.1:{port}", "-g", "g", "--json")):  # fmt: skip
        done = run_cli("admin", *args)
        assert (done.returncode, done.stdout) == (1, ""), done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
        assert done.stderr.startswith(
            f"rmq-broker: admin consumerProgress: {'name server' if '-n' in args else 'broker'} "
            f"127.0.0.1:{port} unreachable"
        )


def test_a_broker_that_never_answers_is_one_line_after_the_timeout() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog), never reads
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        done = run_cli(
            "admin", "topicStatus", "-b", f"127.0.0.1:{port}", "-t", "T", "--timeout", "1"
        )
    assert (done.returncode, done.stdout) == (1, "")
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
    assert done.stderr == (
        f"rmq-broker: admin topicStatus: broker 127.0.0.1:{port} did not answer within 1 s\n"
    )
