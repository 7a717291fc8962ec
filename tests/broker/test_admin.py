"""TRIGGER_DELETE_FILES through `rmq-broker admin deleteExpiredCommitLog`, as mqadmin sends it:
the running broker deletes its expired segments now, whatever the hour; with ACL on only an
admin account may ask; an unreachable broker is one line and exit code 1."""

from __future__ import annotations

import os
import pathlib
import subprocess
import time

import pytest
import trio

from broker.server import BrokerServer
from rmq_client.producer import Message, open_producer
from store.message_store import DefaultMessageStore
from tests.broker.admin_acl import write_acl
from tests.conftest import RunningBroker, make_config, start_broker
from tests.daemon import run_cli
from tests.store.conftest import wait_until

SEGMENT = 4096


def delete_hour_elsewhere() -> str:
    """A `delete_when` hour that is not the current one, so only a manual request deletes."""
    return str((time.localtime().tm_hour + 12) % 24)


async def start_small(
    nursery: trio.Nursery, tmp_path: pathlib.Path, **extra: object
) -> RunningBroker:
    config = make_config(
        tmp_path / "store",
        mapped_file_size_commit_log=SEGMENT,
        delete_when=delete_hour_elsewhere(),
        clean_resource_interval=3_600_000,  # no periodic round: only the request runs one
        delete_physic_files_interval=0,
        **extra,
    )
    return await start_broker(nursery, config)


def store_of(server: BrokerServer) -> DefaultMessageStore:
    store = server.broker.store
    assert isinstance(store, DefaultMessageStore)
    return store


async def fill_and_age(broker: RunningBroker, segments: int, old: int) -> list[str]:
    """Send until `segments` segments exist, make the first `old` look 100 hours old; their
    file names."""
    store = store_of(broker.server)
    async with open_producer("127.0.0.1", broker.port) as producer:
        while store.segment_count < segments:
            await producer.send(Message("Aged", b"x" * 1000))
    files = store.mapped_file_queue.mapped_files[:old]
    # retention waits for the flush (ASYNC_FLUSH here) and the dispatch
    await wait_until(lambda: store.flushed_where >= files[-1].file_from_offset + SEGMENT)
    past = os.path.getmtime(files[0].file_name) - 100 * 3600  # noqa: ASYNC240
    for mapped_file in files:
        os.utime(mapped_file.file_name, (past, past))
    return [f.file_name for f in files]


def admin(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("admin", "deleteExpiredCommitLog", *args)


async def test_the_request_deletes_expired_segments_now(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_small(nursery, tmp_path)
    store = store_of(broker.server)
    old = await fill_and_age(broker, 4, 2)
    done = await trio.to_thread.run_sync(admin, "-b", f"127.0.0.1:{broker.port}")
    assert (done.returncode, done.stdout) == (0, f"127.0.0.1:{broker.port}: success\n")
    await wait_until(lambda: store.segments_deleted == {"manual": 2}, timeout_s=20)
    assert not any(map(os.path.exists, old))
    await broker.stop()


async def test_through_the_name_server_by_cluster(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_small(nursery, tmp_path)
    store = store_of(broker.server)
    await fill_and_age(broker, 3, 1)
    address = f"127.0.0.1:{broker.port}"
    unknown = await trio.to_thread.run_sync(admin, "-n", address, "-c", "NoSuchCluster")
    assert unknown.returncode == 1 and "NoSuchCluster" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1
    done = await trio.to_thread.run_sync(admin, "-n", address, "-c", "DefaultCluster")
    assert (done.returncode, done.stdout) == (0, f"{address}: success\n")
    await wait_until(lambda: store.segments_deleted == {"manual": 1}, timeout_s=20)
    await broker.stop()


async def test_with_acl_only_an_admin_may_ask(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start_small(nursery, tmp_path, acl_enable=True, acl_file=write_acl(tmp_path))
    address = f"127.0.0.1:{broker.port}"
    plain = await trio.to_thread.run_sync(
        admin, "-b", address, "--access-key", "producer1", "--secret-key", "producer-secret"
    )
    assert plain.returncode == 1
    assert plain.stdout.startswith(f"{address}: refused: code 16: Need admin permission")
    ok = await trio.to_thread.run_sync(
        admin, "-b", address, "--access-key", "operator1", "--secret-key", "operator-secret"
    )
    assert (ok.returncode, ok.stdout) == (0, f"{address}: success\n")
    await broker.stop()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give either -b"),
        (("-b", "127.0.0.1:1", "-n", "127.0.0.1:2"), "give either -b"),
        (("-b", "not-an-address"), "HOST:PORT"),
        (("-b", "127.0.0.1:1", "--access-key", "k"), "go together"),
    ],
)
def test_bad_arguments_are_one_line(args: tuple[str, ...], message: str) -> None:
    result = admin(*args)
    assert result.returncode == 2 and message in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unreachable_broker_is_one_line_and_exit_1() -> None:
    result = admin("-b", "127.0.0.1:1", "--timeout", "3")
    assert result.returncode == 1
    assert result.stdout.startswith("127.0.0.1:1: unreachable")
    assert len(result.stdout.splitlines()) == 1 and "Traceback" not in result.stderr
