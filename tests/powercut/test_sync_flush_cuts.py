"""SYNC_FLUSH across power cuts: the broker is SIGKILLed at a random moment under concurrent
load from several connections, then everything no fsync covered is dropped (the cut comes after
the kill: the kernel hands over the dead process's dirty pages first, and they are lost too),
then the broker restarts on what survived. Some cuts land while the broker is recovering.

After every restart: every acknowledged message is in the log exactly once, at its offset, with
the topic, queue and queue offset its acknowledgement named; every queue's offsets run 0..n-1;
the broker accepts sends again. Right after each cut, before recovery, every acknowledged message
is already whole on disk and the checkpoint is not ahead of the log; at the end the consume
queues match the log. The cuts must have dropped something, or they proved nothing.
`RMQ_SOAK=1` runs many more cuts.
"""

from __future__ import annotations

import functools
import pathlib
import random
import time

import trio

from tests.powercut.checks import check_consume_queues, check_on_disk_after_cut
from tests.powercut.load import produce_then_kill
from tests.powercut.mount import PowerCutFS
from tests.reliability.acks import Ack, check_acknowledged
from tests.reliability.conftest import SOAK, Daemon, read_records

CUTS = 40 if SOAK else 5
PRODUCERS = 3
SYNC = ("--flush-disk-type", "SYNC_FLUSH")


def cut_during_recovery(
    powercut: PowerCutFS, store_dir: pathlib.Path, brokers: list[Daemon], rng: random.Random
) -> dict[str, int]:
    """Start the broker and cut the power before, or soon after, it is ready to serve."""
    daemon = Daemon(store_dir, *SYNC, wait=False)
    brokers.append(daemon)
    time.sleep(rng.uniform(0.0, 0.6))
    daemon.kill()
    stats = powercut.cut(seed=rng.randrange(1 << 30))
    powercut.mount()
    return stats


def test_sync_flush_loses_nothing_acknowledged_across_power_cuts(
    powercut: PowerCutFS, brokers: list[Daemon]
) -> None:
    store_dir = powercut.mountpoint / "store"
    rng = random.Random(21)
    acked: dict[int, Ack] = {}
    dropped = 0
    for cycle in range(CUTS):
        daemon = Daemon(store_dir, *SYNC)
        brokers.append(daemon)
        check_acknowledged(read_records(store_dir), acked)
        acks: dict[int, Ack] = {}
        load = trio.run(
            functools.partial(
                produce_then_kill,
                daemon.port,
                acks,
                producers=PRODUCERS,
                tag=f"c{cycle}",
                rng=rng,
                seconds=rng.uniform(0.3, 1.5),
                kill=daemon.kill,
            )
        )
        assert acks, f"cut {cycle}: nothing acknowledged before the cut ({load})"
        assert not acks.keys() & acked.keys(), "an offset was acknowledged twice"
        acked.update(acks)
        # every other cut lets some unsynced pages reach the disk, and tears the last one
        odds = (0.3, 0.5) if cycle % 2 else (0.0, 0.0)
        stats = powercut.cut(seed=cycle, keep=odds[0], tear=odds[1])
        dropped += stats["pages_dropped"] + stats["bytes_truncated"]
        powercut.mount()
        check_on_disk_after_cut(store_dir, acked)
        if cycle % 3 == 1:
            cut_during_recovery(powercut, store_dir, brokers, rng)
    daemon = Daemon(store_dir, *SYNC)
    brokers.append(daemon)
    records = read_records(store_dir)
    check_acknowledged(records, acked)
    assert daemon.stop() == 0
    check_consume_queues(store_dir, records)
    assert dropped, "no cut dropped anything: the file system did not model a power cut"
    print(f"powercut_sync_flush cuts={CUTS} acknowledged={len(acked)} dropped={dropped}")
