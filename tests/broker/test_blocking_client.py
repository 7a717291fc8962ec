"""`BlockingProducer` from a plain thread against a real `rmq-broker serve` process: the calls
of the async producer, the same results and errors, and a clean close."""

from __future__ import annotations

import pathlib

import pytest

from protocol.codes import ResponseCode
from rmq_client.blocking import BlockingProducer
from rmq_client.producer import ConnectionClosedError, Message, SendError, SendStatus
from store.reader import CommitLogReader
from tests.daemon import Daemon


def test_blocking_producer_sends_batches_oneways_and_raises_refusals(
    tmp_path: pathlib.Path,
) -> None:
    daemon = Daemon(tmp_path / "store", "--flush-disk-type", "SYNC_FLUSH")
    try:
        with BlockingProducer("127.0.0.1", daemon.port) as producer:
            one = producer.send(Message("Blocking", b"one", queue_id=0))
            assert one.status is SendStatus.SEND_OK
            assert one.queue_offset == 0
            batch = producer.send_batch(
                [Message("Blocking", b"two"), Message("Blocking", b"three")]
            )
            assert batch.status is SendStatus.SEND_OK
            producer.send_oneway(Message("Blocking", b"four", queue_id=0))
            with pytest.raises(SendError) as refused:
                producer.send(Message("bad topic!", b"x"))
            assert refused.value.code == ResponseCode.SYSTEM_ERROR  # as 4.9's topic check
            assert "illegal characters" in str(refused.value)
            after = producer.send(Message("Blocking", b"five", queue_id=0))  # still usable
            assert after.queue_offset >= 1
        assert daemon.stop() == 0
    finally:
        if daemon.process.poll() is None:
            daemon.kill()
    with CommitLogReader(str(tmp_path / "store")) as reader:
        bodies = sorted(r.body or b"" for r in reader.iter_records(reader.min_offset))
    assert bodies == sorted([b"one", b"two", b"three", b"four", b"five"])


def test_blocking_producer_raises_when_nothing_listens(tmp_path: pathlib.Path) -> None:
    daemon = Daemon(tmp_path / "store")
    port = daemon.port
    assert daemon.stop() == 0
    with pytest.raises((ConnectionClosedError, OSError)):
        BlockingProducer("127.0.0.1", port)
