"""The official C++ client (PyPI `rocketmq==0.4.4`) against a broker with ACL on.

`Producer.set_session_credentials` makes the client sign every request (AccessKey, OnsChannel
and the declared header fields, then the body). With the right secret its sends succeed; with a
wrong secret, an unknown access key, no credentials, or a topic it may not publish to, every
send attempt is answered NO_PERMISSION (the client logs the code and remark it received) and
nothing reaches the commit log. The client runs in a subprocess (this file, run as a script)
with HOME in a temporary directory, where it writes its log.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import sys
import time

import trio

from store.reader import CommitLogReader
from tests.conftest import make_config, start_broker
from tests.integration.cpp_producer import shutdown_clear_of_route_refresh

ACL = """
accounts:
  - accessKey: cppuser1
    secretKey: cppsecret1
    defaultTopicPerm: DENY
    topicPerms: ["CppAllowed=PUB", "CppReadOnly=SUB"]
"""
SENDS = 3
ROOT = pathlib.Path(__file__).resolve().parents[2]
BAD_SIGNATURE = "Check signature failed for accessKey="
NO_PERM = "No default permission for topic:"
_REFUSAL = re.compile(r"processSendResponse error remark:(.*), error code:(\d+)")


def _body(label: str, index: int) -> bytes:
    # Every third body is 8 KiB: the client compresses it, and signs the compressed bytes.
    return f"{label}-{index}-".encode() * (700 if index % 3 == 2 else 1)


def _client_main(port: str, topic: str, access_key: str, secret_key: str, label: str) -> None:
    from rocketmq.client import Message, Producer

    producer = Producer(f"acl_{label}", timeout=3000)
    producer.set_namesrv_addr(f"127.0.0.1:{port}")
    if access_key != "-":
        producer.set_session_credentials(access_key, secret_key, "LOCAL")
    producer.start()
    producer_started = time.monotonic()
    try:
        for index in range(SENDS):
            msg = Message(topic)
            msg.set_tags("TagA")
            msg.set_keys(f"key-{index}")
            msg.set_property("städte", "Zürich|Genève")  # non-ASCII properties are signed too
            msg.set_body(_body(label, index))
            try:
                result = producer.send_sync(msg)
                print(json.dumps({"ok": True, "status": int(result.status)}), flush=True)
            except Exception as exc:
                print(json.dumps({"ok": False, "error": str(exc)}), flush=True)
    finally:
        shutdown_clear_of_route_refresh(producer, producer_started)


@dataclasses.dataclass(frozen=True)
class Case:
    label: str
    topic: str
    access_key: str
    secret_key: str
    #: the refusal remark expected for each send attempt ("" when sends must succeed)
    remark: str = ""


def _client_env(home: pathlib.Path) -> dict[str, str]:
    home.mkdir()
    return {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT)}


def _logged_refusals(home: pathlib.Path) -> list[tuple[str, int]]:
    text = "".join(p.read_text(errors="replace") for p in home.glob("logs/rocketmq-cpp/*"))
    return [(m[1], int(m[2])) for m in _REFUSAL.finditer(text)]


async def _run_client(
    port: int, root: pathlib.Path, case: Case
) -> tuple[list[dict[str, object]], list[tuple[str, int]]]:
    """The client's per-send outcomes and the (remark, code) refusals it logged."""
    home = root / case.label
    args = [sys.executable, __file__, str(port), case.topic, case.access_key]
    args += [case.secret_key, case.label]
    with trio.fail_after(30):
        done = await trio.run_process(
            args, env=_client_env(home), capture_stdout=True, capture_stderr=True
        )
    outcomes = [json.loads(line) for line in done.stdout.decode().splitlines() if line[:1] == "{"]
    return outcomes, _logged_refusals(home)


async def test_cpp_client_signs_and_refusals_store_nothing(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL)
    config = make_config(tmp_path / "store", acl_enable=True, acl_file=str(acl_file))
    broker = await start_broker(nursery, config)
    port = broker.port

    good = Case("good", "CppAllowed", "cppuser1", "cppsecret1")
    outcomes, refusals = await _run_client(port, tmp_path, good)
    assert outcomes == [{"ok": True, "status": 0}] * SENDS
    assert refusals == []

    refused = [
        Case("wrong", "CppAllowed", "cppuser1", "not-the-secret", f"{BAD_SIGNATURE}cppuser1"),
        Case("unknown", "CppAllowed", "nobody99", "cppsecret1", f"{BAD_SIGNATURE}nobody99"),
        # Without credentials this client still sends an empty AccessKey: an unknown key.
        Case("anonymous", "CppAllowed", "-", "-", BAD_SIGNATURE),
        Case("readonly", "CppReadOnly", "cppuser1", "cppsecret1", f"{NO_PERM}CppReadOnly"),
    ]
    for case in refused:
        outcomes, refusals = await _run_client(port, tmp_path, case)
        assert len(outcomes) == SENDS and not any(o["ok"] for o in outcomes), outcomes
        # The client retries a refused send: every attempt was answered, each with code 16.
        assert len(refusals) >= SENDS, (case.label, refusals)
        assert set(refusals) == {(case.remark, 16)}, case.label

    await broker.stop()
    with CommitLogReader(config.store.store_path_root_dir) as reader:
        stored = [(r.topic, r.body) for r in reader.iter_records(reader.min_offset)]
    assert len(stored) == SENDS
    assert {topic for topic, _ in stored} == {"CppAllowed"}
    # The 8 KiB body arrives compressed (as signed); compare the small ones exactly.
    assert [body for _, body in stored[:2]] == [_body("good", 0), _body("good", 1)]


if __name__ == "__main__":
    _client_main(*sys.argv[1:6])
