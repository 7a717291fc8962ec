"""The README's RocketMQ 5 example, run as written (only the port changes) by the official
Python client's interpreter against a real broker; the message it sends is read back with the
project's 4.x pull consumer."""

from __future__ import annotations

import pathlib
import re

import trio

from protocol.properties import decode_properties
from tests.daemon import Daemon
from tests.grpc.official import ROOT, run_official
from tests.grpc.test_produce_client import _pull_all

SECTION = "### RocketMQ 5 clients (gRPC)"


def example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1
    return str(blocks[0])


def test_the_readme_5x_example_sends_through_the_grpc_port(tmp_path: pathlib.Path) -> None:
    source = example()
    assert "127.0.0.1:8081" in source
    daemon = Daemon(tmp_path / "store", env={"RMQ_GRPC_LISTEN": "127.0.0.1:0"})
    try:
        grpc_port = int(str(daemon.event("listening")["grpc_port"]))
        run_official("-c", source.replace("8081", str(grpc_port)), timeout_s=120)
        records = trio.run(_pull_all, daemon.port, "TopicA", 1)
        assert [r.body for r in records] == [b"hello"]
        assert decode_properties(records[0].properties)["TAGS"] == "TagA"
    finally:
        assert daemon.stop() == 0
