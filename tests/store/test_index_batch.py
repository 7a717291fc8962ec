"""The index built a run at a time (`store.index.batch`) against the index built key by key
(`index_keys`, `IndexFile.put_key`): the same keys, the same hashes, the same file bytes, for
runs whose keys collide in a slot, repeat within a record and across records, fill files in the
middle of a record, and sit in properties that only look like KEYS or UNIQ_KEY."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest
import trio

from store.config import MessageStoreConfig
from store.index.batch import run_keys
from store.index.index_file import index_keys, key_hash
from store.index.locate import locate_run
from store.index.service import INDEX_DIR, IndexService
from store.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    get_transaction_value,
)
from store.message_store import DefaultMessageStore
from store.reader import CommitLogReader
from store.status import PutMessageStatus
from tests.store.conftest import make_msg

SLOTS = 5  # every run collides
ITEMS = 8  # seven items a file: files fill in the middle of records

#: (topic, properties, sys_flag): what a record may hold where the index looks
RECORDS: list[tuple[str, str, int]] = [
    ("T1", "UNIQ_KEY\x01u1\x02KEYS\x01a b  a\x02", 0),  # a key twice in one record, two spaces
    ("T1", "KEYS\x01a\x02UNIQ_KEY\x01u2", 0),  # KEYS first; UNIQ_KEY is still put first
    ("T1", "TAGS\x01x\x02XKEYS\x01decoy\x02KEYS\x01real", 0),  # a name that ends in KEYS
    ("T1", "TAGS\x01vKEYS\x01no\x02UNIQ_KEY\x01u3", 0),  # KEYS\x01 inside a value
    ("T1", "UNIQ_KEY\x01\x02KEYS\x01 ", 0),  # empty UNIQ_KEY, KEYS of spaces only: no key
    ("T1", "", 0),
    ("T1", "KEYS\x01first\x02KEYS\x01second", 0),  # a name twice: the first counts
    ("T1", "KEYS\x01r1 r2\x02UNIQ_KEY\x01ur", TRANSACTION_ROLLBACK_TYPE),  # not indexed
    ("T1", "KEYS\x01p1\x02UNIQ_KEY\x01up", TRANSACTION_PREPARED_TYPE),
    ("T1", "KEYS\x01c1", TRANSACTION_COMMIT_TYPE),
    ("T1", "KEYS\x01ключ κλειδί 😀 a", 0),  # past ASCII, and past the BMP (two UTF-16 units)
    ("Tö", "KEYS\x01a\x02UNIQ_KEY\x01u4", 0),  # a topic past ASCII
    ("T2", "KEYS\x01a\x02UNIQ_KEY\x01u5\x02", 0),
    ("T2", "WAIT\x01true\x02KEYS\x01" + "long" * 40 + " a", 0),
    ("T1", "KEYS\x01Aa BB oxqlwna", 0),  # one Java hash; "T1#oxqlwna" hashes to int32's minimum
    ("T1", "KEYS\x01a", 0),  # properties ending without a separator, then a record that starts
    ("T1", "UNIQ_KEY\x01u6\x02KEYS\x01a", 0),  # with a name
]


@pytest.fixture
def log_root(config: MessageStoreConfig) -> str:
    """A commit log of RECORDS three times over, written without an index."""
    trio.run(write_records, dataclasses.replace(config, message_index_enable=False))
    return config.store_path_root_dir


async def write_records(config: MessageStoreConfig) -> None:
    async with DefaultMessageStore.open(config) as store:
        for _ in range(3):
            for n, (topic, properties, sys_flag) in enumerate(RECORDS):
                # an IPv6 host now and then: a run of mixed layouts is decoded without numpy
                host = ("2001:db8::1", 40000) if n % 5 == 2 else ("127.0.0.1", 0)
                msg = make_msg(
                    topic=topic, properties=properties, sys_flag=sys_flag, born_host=host
                )
                result = await store.put_message(msg)
                assert result.status is PutMessageStatus.PUT_OK


def record_ends(root: str) -> list[int]:
    with CommitLogReader(root) as reader:
        return [r.physical_offset + r.total_size for r in reader.iter_records(0)]


def build(root: str, copy: str, *, vectorised: bool, stops: list[int]) -> list[bytes]:
    """The index files (oldest first) and checkpoint a service builds over a copy of `root`,
    one batch to each of `stops`."""
    shutil.copytree(root, copy)
    service = IndexService.open(copy, SLOTS, ITEMS, log_min=0, log_max=stops[-1], abnormal=False)
    service.vectorised = vectorised
    service.min_vectorised_run = 1
    for stop in stops:
        while service.indexed_offset < stop:
            assert service.build_batch(stop)
    service.save(force=True)
    assert service.vectorised is vectorised  # numpy was there: the batched path ran
    assert type(service.indexed_offset) is int  # not a numpy integer
    files = [f.mm[:] for f in service.files]
    offset, _, count = Path(copy, "config", "indexCheckpoint").read_text().split()
    service.close()
    assert len(os.listdir(os.path.join(copy, INDEX_DIR))) == len(files)
    return [*files, f"{offset} {count}".encode()]


def test_run_keys_are_the_keys_and_hashes_of_each_record(log_root: str) -> None:
    with CommitLogReader(log_root) as reader:
        expected = [
            (rec.physical_offset, key_hash(f"{rec.topic}#{key}"))
            for rec in reader.iter_records(0, include_body=False)
            if get_transaction_value(rec.sys_flag) != TRANSACTION_ROLLBACK_TYPE
            for key in index_keys(rec.properties)
        ]
        decoded: list[tuple[int, int]] = []  # from runs decoded whole
        for columns in reader.iter_columns(0, include_body=False, verify_crc=False, run=1000):
            keys = run_keys(columns)
            decoded.extend(zip(keys.offsets.tolist(), keys.hashed.tolist(), strict=True))
        located: list[tuple[int, int]] = []  # from the fields the index reads only
        for run in reader.iter_walks(0, run=7):
            fields = locate_run(run)
            assert fields is not None
            keys = run_keys(fields)
            located.extend(zip(keys.offsets.tolist(), keys.hashed.tolist(), strict=True))
    assert decoded == expected
    assert located == expected
    assert len(expected) == 3 * 28  # every case above adds what its comment says
    assert key_hash("T1#oxqlwna") == 0


@pytest.mark.parametrize("run", [1, 2, 5, 1000])
def test_batches_write_the_bytes_of_the_key_by_key_path(
    log_root: str, tmp_path: Path, run: int
) -> None:
    ends = record_ends(log_root)
    one_by_one = build(log_root, str(tmp_path / "keys"), vectorised=False, stops=[ends[-1]])
    batched = build(
        log_root, str(tmp_path / "runs"), vectorised=True, stops=[*ends[run - 1 :: run], ends[-1]]
    )
    assert len(one_by_one) >= 10  # files filled in the middle of records
    assert batched == one_by_one


def test_a_batch_after_a_restart_chains_to_the_items_before_it(
    log_root: str, tmp_path: Path
) -> None:
    """Half the log indexed key by key and saved, the rest in one batch after a reopen: the
    batch chains to the slots the first half left, as the key-by-key path does."""
    ends = record_ends(log_root)
    half = ends[len(ends) // 2]
    copies = []
    for name, vectorised in (("keys", False), ("mixed", True)):
        copy = str(tmp_path / name)
        build(log_root, copy, vectorised=False, stops=[half])
        service = IndexService.open(copy, SLOTS, ITEMS, log_min=0, log_max=ends[-1], abnormal=True)
        service.vectorised = vectorised
        service.min_vectorised_run = 1
        while service.build_batch(ends[-1]):
            pass
        service.save(force=True)
        copies.append([f.mm[:] for f in service.files])
        service.close()
    assert copies[0] == copies[1]
