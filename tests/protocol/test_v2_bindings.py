"""The RocketMQ 5 bindings copied out of the official client's pinned wheel (protocol/v2)."""

from __future__ import annotations

import pathlib
import zipfile

import pytest

from protocol.v2 import build, load


def test_the_bindings_are_made_from_the_pinned_wheel_and_round_trip_a_send() -> None:
    assert build.is_current()
    definition, service = load()
    request = service.SendMessageRequest()
    message = request.messages.add()
    message.topic.name = "T"
    message.system_properties.message_id = "01AB"
    message.body = b"body"
    again = service.SendMessageRequest.FromString(request.SerializeToString())
    assert again.messages[0].topic.name == "T"
    assert again.messages[0].body == b"body"
    # the service module refers to the definitions through this package, not the client's
    assert service.SendMessageResponse().status.DESCRIPTOR is definition.Status.DESCRIPTOR
    assert definition.Code.Value("MESSAGE_BODY_TOO_LARGE") == 41301


def test_a_wheel_with_another_digest_is_refused_and_nothing_is_written(
    tmp_path: pathlib.Path,
) -> None:
    fake = tmp_path / build.WHEEL
    with zipfile.ZipFile(fake, "w") as archive:
        for name in ("definition_pb2", "service_pb2"):
            archive.writestr(f"{build.INNER}/{name}.py", "raise SystemExit('not the real one')\n")
    before = {p.name: p.read_bytes() for p in build.HERE.glob("*_pb2.py")}
    with pytest.raises(SystemExit, match="sha256"):
        build.main(["--wheel", str(fake)])
    assert {p.name: p.read_bytes() for p in build.HERE.glob("*_pb2.py")} == before
    assert build.main(["--check"]) == 0
