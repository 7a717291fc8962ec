"""Random send requests with well-formed frames but hostile field values, against an in-process
broker over real sockets (`broker.server.serve`): every request gets an answer with a code and the
connection stays open; no request reaches the dispatcher's catch-all (`processor_failed`, the sign
of an exception the send path did not expect); the broker serves a clean producer afterwards.
"""

from __future__ import annotations

import json
import pathlib
import random
import struct
from collections.abc import Callable
from typing import Any

import structlog
import trio

from protocol.batch import BatchEntry, encode_batch_body
from protocol.codes import RequestCode
from protocol.frame import FrameDecoder
from rmq_client.producer import Message, SendStatus, open_producer
from tests.conftest import make_config, start_broker
from tests.reliability.conftest import SOAK, V1_NAMES

REQUESTS = 30_000 if SOAK else 3_000
PIPELINE = 50
BASE: dict[str, Any] = {
    "a": "pg",
    "b": "FuzzTopic",
    "c": "TBW102",
    "d": "4",
    "e": "0",
    "f": "0",
    "g": "1700000000000",
    "h": "0",
    "i": "TAGS\x01t\x02KEYS\x01k",
}


def hostile_value(rng: random.Random) -> Any:
    makers: list[Callable[[], Any]] = [
        lambda: None,
        lambda: rng.randint(-(1 << 40), 1 << 40),
        lambda: rng.choice([True, False]),
        lambda: rng.random() * 1e12,
        lambda: "",
        lambda: "".join(chr(rng.randint(0, 0x2FF)) for _ in range(rng.randint(1, 12))),
        lambda: str(rng.choice([2**31, -(2**31) - 1, 2**63, 10**30, -1, 255, 99999999])),
        lambda: "%RETRY%" + rng.choice(["g", "", "x" * 200]),
        lambda: rng.choice(["SCHEDULE_TOPIC_XXXX", "TBW102", "RMQ_SYS_TRANS_HALF_TOPIC"]),
        lambda: "x" * rng.choice([128, 4096, 40_000]),
        lambda: "\x01\x02".join(
            rng.choice(["TRAN_MSG", "DELAY", "WAIT", "true", "-3", "99"])
            for _ in range(rng.randint(1, 6))
        ),
    ]
    return rng.choice(makers)()


def hostile_request(rng: random.Random, opaque: int) -> bytes:
    fields = dict(BASE)
    for _ in range(rng.randint(1, 4)):
        name = rng.choice([*"abcdefghijklmn", "zz"])
        if rng.random() < 0.15:
            fields.pop(name, None)
        else:
            fields[name] = hostile_value(rng)
    code = rng.choice([RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE, 10])
    if code == 10:  # V1 names for SEND_MESSAGE
        fields = {V1_NAMES[ord(k) - 97] if len(k) == 1 else k: v for k, v in fields.items()}
    body: bytes = rng.choice(
        [
            b"",
            rng.randbytes(rng.randint(1, 64)),
            encode_batch_body([BatchEntry(0, b"m", "TAGS\x01x")] * rng.randint(1, 3)),
        ]
    )
    header = json.dumps(
        {
            "code": code,
            "flag": 0,
            "language": "JAVA",
            "opaque": opaque,
            "version": 401,
            "extFields": {k: v for k, v in fields.items()},
        }
    ).encode()
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


async def fuzz(port: int, rng: random.Random) -> dict[int, int]:
    codes: dict[int, int] = {}
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    decoder = FrameDecoder()
    async with stream:
        for start in range(0, REQUESTS, PIPELINE):
            frames = [hostile_request(rng, start + i) for i in range(PIPELINE)]
            await stream.send_all(b"".join(frames))
            answered: set[int] = set()
            with trio.fail_after(30):
                while len(answered) < PIPELINE:
                    data = await stream.receive_some(1 << 16)
                    assert data, f"the broker closed the connection after {start} requests"
                    for response in decoder.feed(data):
                        assert response.is_response
                        answered.add(response.opaque)
                        codes[response.code] = codes.get(response.code, 0) + 1
            assert answered == set(range(start, start + PIPELINE))
    return codes


async def test_hostile_send_fields_are_answered_and_never_crash_the_send_path(
    tmp_path: pathlib.Path,
) -> None:
    config = make_config(tmp_path / "store", flush_disk_type="SYNC_FLUSH")
    with structlog.testing.capture_logs() as logs:
        async with trio.open_nursery() as nursery:
            broker = await start_broker(nursery, config)
            codes = await fuzz(broker.port, random.Random(4242))
            async with open_producer("127.0.0.1", broker.port) as client:
                result = await client.send(Message("AfterFuzz", b"ok"))
            assert result.status is SendStatus.SEND_OK
            await broker.stop()
    assert any(e.get("event") == "listening" for e in logs), "the broker's events were not seen"
    failures = [e for e in logs if e.get("event") == "processor_failed"]
    assert failures == [], failures[:3]
    assert sum(codes.values()) == REQUESTS
    print(f"processor_fuzz requests={REQUESTS} codes={dict(sorted(codes.items()))}")
