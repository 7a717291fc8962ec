"""The FIFO delivery counts' file: written when changed and read back; a damaged file stops the
broker with its name rather than resetting counts; `prune` keeps exactly the counts of messages
still to be handed out again."""

from __future__ import annotations

import pathlib

import pytest

from broker.pop.order_attempts import OrderAttemptsFile, load, prune
from store.errors import StoreLoadError


async def test_the_table_round_trips_and_is_written_only_when_changed(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "config" / "popOrderAttempts.json"
    assert load(path) == {}
    table = {("g", "T", 1, 7): 2, ("g", "%RETRY%g_T", 0, 0): 1}
    file = OrderAttemptsFile(path, table)
    await file.persist()
    assert not path.exists()  # nothing changed since the table was given
    table["h", "T", 0, 3] = 4
    await file.persist()
    assert load(path) == table
    path.write_text("{}")
    await file.persist()  # unchanged since the last write: not written again
    assert path.read_text() == "{}"


@pytest.mark.parametrize(
    "text",
    ["not json", "{}", '{"orderAttempts": [{"group": "g"}]}', '{"orderAttempts": [1]}'],
)
def test_a_damaged_file_is_refused_with_its_name(tmp_path: pathlib.Path, text: str) -> None:
    path = tmp_path / "popOrderAttempts.json"
    path.write_text(text)
    with pytest.raises(StoreLoadError, match=r"popOrderAttempts\.json"):
        load(path)


def test_prune_drops_what_is_below_the_pop_offset_and_not_in_flight() -> None:
    offsets = {("g", "T", 0): 5, ("g", "T", 1): 9}
    table = {
        ("g", "T", 0, 3): 1,  # acknowledged after the last write: below the offset, not held
        ("g", "T", 0, 5): 2,  # rewound to: the pop offset itself
        ("g", "T", 1, 8): 1,  # below the offset but held by a checkpoint in flight
        ("x", "T", 0, 0): 3,  # a group with no offset: nothing is below it
    }
    dropped = prune(table, lambda g, t, q: offsets.get((g, t, q)), [("g", "T", 1, 8)])
    assert dropped == 1
    assert set(table) == {("g", "T", 0, 5), ("g", "T", 1, 8), ("x", "T", 0, 0)}
