"""SYNC_MASTER + SYNC_FLUSH, SIGKILL of the master under load at random moments: every message
the master acknowledged is on the slave, once, where its acknowledgement said, with gap-free
queue offsets and whole batches. Each cycle restarts the master on its store and the slave on
its own, so the slave also reconnects after restarting behind (or level with) the master.
`RMQ_SOAK=1` runs 30 cycles instead of 3.
"""

from __future__ import annotations

import pathlib
import random

import trio

from tests.ha.conftest import SOAK, Daemon, start_master, start_slave
from tests.reliability.acks import Ack
from tests.reliability.test_crash_cycles import check, load_until_killed

SYNC = {"RMQ_FLUSH_DISK_TYPE": "SYNC_FLUSH"}


def test_every_acknowledged_message_is_on_the_slave_after_master_kills(
    tmp_path: pathlib.Path, daemons: list[Daemon]
) -> None:
    cycles = 30 if SOAK else 3
    rng = random.Random(25)
    acked: dict[int, Ack] = {}
    for cycle in range(cycles):
        master, ha_port = start_master(tmp_path / "master", daemons, SYNC)
        slave = start_slave(tmp_path / "slave", daemons, ha_port, SYNC)
        master.event("ha_transfer_started")  # the master counts the slave before the load
        acks = trio.run(load_until_killed, master, cycle, rng)
        assert acks, f"cycle {cycle}: nothing acknowledged before the kill"
        assert not acks.keys() & acked.keys(), "an offset was acknowledged twice"
        acked.update(acks)
        assert slave.stop() == 0
        stored = check(tmp_path / "slave", acked)
        daemons.clear()
    print(f"ha_master_kill cycles={cycles} acknowledged={len(acked)} on_slave={stored} lost=0")
