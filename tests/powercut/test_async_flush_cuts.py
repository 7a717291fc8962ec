"""ASYNC_FLUSH across power cuts: acknowledged messages the store had not flushed yet may be
lost, but only as a tail: every acknowledged message below the log's end after the cut is there,
whole, and none is missing in between; everything below the durable `flushoffset` the store
published survives; and the restart reports the end it recovered to, which is where the lost
tail begins. Unlike SIGKILL alone (`tests/reliability/test_async_flush_loss.py`), the cuts do
lose acknowledged messages, or the file system modelled no power cut."""

from __future__ import annotations

import functools
import pathlib
import random

import pytest
import trio

from store.checkpoint import read_flush_offset
from tests.powercut.checks import check_on_disk_after_cut
from tests.powercut.load import produce_then_kill
from tests.powercut.mount import PowerCutFS
from tests.reliability.acks import Ack, check_acknowledged
from tests.reliability.conftest import SOAK, Daemon, read_records

CUTS = 12 if SOAK else 3
ASYNC = ("--flush-disk-type", "ASYNC_FLUSH")
ENV = {
    "RMQ_FLUSH_INTERVAL_COMMIT_LOG_MS": "300",
    "RMQ_FLUSH_COMMIT_LOG_THOROUGH_INTERVAL_MS": "1000",
}


def surviving_tail(
    store_dir: pathlib.Path, acks: dict[int, Ack], durable_before: int
) -> tuple[dict[int, Ack], int]:
    """After a cut: the acknowledged messages that survived (all those below the log's end) and
    the log's end."""
    valid_end = check_on_disk_after_cut(store_dir, {})
    kept = {o: a for o, a in acks.items() if o < valid_end}
    check_on_disk_after_cut(store_dir, kept)  # whole, and no hole below the end
    assert valid_end >= durable_before, (
        f"the log ends at {valid_end}, below the durable offset {durable_before} the store "
        "published before the cut"
    )
    return kept, valid_end


@pytest.mark.parametrize("pool", [False, True], ids=["mmap", "transient_store_pool"])
def test_async_flush_loses_only_a_tail_past_the_last_flush(
    powercut: PowerCutFS, brokers: list[Daemon], pool: bool
) -> None:
    """`transient_store_pool`: appends go to write buffers, committed to the files (pwrite)
    and then flushed; what was not committed is lost with the process already."""
    store_dir = powercut.mountpoint / "store"
    env = {**ENV, "RMQ_TRANSIENT_STORE_POOL_ENABLE": str(pool).lower()}
    rng = random.Random(5)
    acked: dict[int, Ack] = {}
    lost = 0
    for cycle in range(CUTS):
        daemon = Daemon(store_dir, *ASYNC, env=env)
        brokers.append(daemon)
        acks: dict[int, Ack] = {}
        trio.run(
            functools.partial(
                produce_then_kill,
                daemon.port,
                acks,
                producers=3,
                tag=f"a{cycle}",
                rng=rng,
                seconds=rng.uniform(0.5, 1.5),
                kill=daemon.kill,
            )
        )
        assert acks
        powercut.cut(seed=cycle)
        powercut.mount()
        flushed = read_flush_offset(str(store_dir))
        durable_before = flushed[0] if flushed is not None else 0
        kept, valid_end = surviving_tail(store_dir, {**acked, **acks}, durable_before)
        assert acked.keys() <= kept.keys(), "a message acknowledged before the last cut is lost"
        lost += len(acks) - (len(kept) - len(acked))
        acked = kept
        restarted = Daemon(store_dir, *ASYNC, env=env)
        brokers.append(restarted)
        assert restarted.event("commit_log_recovered")["offset"] == valid_end
        check_acknowledged(read_records(store_dir), acked)
        assert restarted.stop() == 0  # a clean stop flushes everything: nothing more is lost
        powercut.cut()
        powercut.mount()
    assert lost, "no cut lost an unflushed acknowledged message: no power cut was modelled"
    print(f"powercut_async_flush cuts={CUTS} kept={len(acked)} lost={lost}")
