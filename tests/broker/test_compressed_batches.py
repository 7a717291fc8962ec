"""Batch bodies compressed with LZ4 and ZSTD over real sockets: the broker inflates the body with
the algorithm sysFlag names, splits it into records and stores each uncompressed, exactly as the
producer wrote it; a body that does not decode is refused and nothing is stored."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import lz4.frame
import pytest
import zstandard

from broker.config import BrokerConfig
from protocol.batch import BatchEntry, encode_batch_body
from protocol.codes import ResponseCode
from protocol.compression import COMPRESSION_LZ4, COMPRESSION_ZSTD
from protocol.properties import encode_properties
from rmq_client.producer import Producer
from tests.broker.test_send import records, send_raw, v1_header
from tests.conftest import RunningBroker, make_config


def lz4_frame(data: bytes) -> bytes:
    return bytes(lz4.frame.compress(data))


def zstd_stream(data: bytes) -> bytes:
    out = zstandard.ZstdCompressor().compressobj()
    return out.compress(data) + out.flush()


ALGORITHMS: dict[str, tuple[int, Callable[[bytes], bytes]]] = {
    "lz4": (COMPRESSION_LZ4, lz4_frame),
    "zstd": (COMPRESSION_ZSTD, lambda data: zstandard.ZstdCompressor().compress(data)),
    "zstd_stream": (COMPRESSION_ZSTD, zstd_stream),
}


@pytest.fixture
def broker_config(tmp_path: pathlib.Path) -> BrokerConfig:
    return make_config(tmp_path / "store", flush_disk_type="SYNC_FLUSH", max_message_size=64 * 1024)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
async def test_an_lz4_or_zstd_batch_body_is_inflated_and_split(
    producer: Producer, broker: RunningBroker, name: str
) -> None:
    kind, compress = ALGORITHMS[name]
    bodies = [b"%d:" % i + bytes(range(256)) * (4 + i) for i in range(3)]
    entries = [
        BatchEntry(0, body, encode_properties({"KEYS": f"k{i}"})) for i, body in enumerate(bodies)
    ]
    packed = compress(encode_batch_body(entries))
    assert len(packed) < sum(map(len, bodies))  # really compressed
    header = v1_header(batch=True, sys_flag=1 | kind, properties="")
    response = await send_raw(producer, header, packed)
    assert response.code == 0, response.remark
    stored = records(broker.config)
    assert [r.body for r in stored] == bodies
    assert all(r.sys_flag & (1 | 0x700) == 0 for r in stored)  # stored uncompressed
    assert all(r.crc_ok is not False for r in stored)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
async def test_a_batch_body_that_does_not_decode_is_refused(
    producer: Producer, broker: RunningBroker, name: str
) -> None:
    kind, compress = ALGORITHMS[name]
    body = encode_batch_body([BatchEntry(0, b"x" * 5000, "")])
    truncated = compress(body)[:-8]
    response = await send_raw(producer, v1_header(batch=True, sys_flag=1 | kind), truncated)
    assert response.code == ResponseCode.MESSAGE_ILLEGAL, response.remark
    assert response.remark is not None and "does not decode" in response.remark
    assert records(broker.config) == []
