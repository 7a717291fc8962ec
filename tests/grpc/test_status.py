"""The remoting -> 5.x status table (broker/grpc/status.py)."""

from __future__ import annotations

from broker.grpc.status import REMOTING_TO_V5, from_remoting, ok
from protocol.codes import ResponseCode
from protocol.v2 import load


def test_every_mapped_code_names_a_5x_code_and_keeps_the_remark() -> None:
    definition, _ = load()
    for remoting, name in REMOTING_TO_V5.items():
        answer = from_remoting(remoting, "why")
        assert answer.code == definition.Code.Value(name)
        assert answer.message == "why"
    assert ok().code == definition.Code.OK


def test_codes_outside_the_table_are_internal_errors_named_by_number() -> None:
    definition, _ = load()
    unmapped = from_remoting(ResponseCode.PULL_NOT_FOUND, None)
    assert unmapped.code == definition.Code.INTERNAL_SERVER_ERROR
    assert unmapped.message == str(int(ResponseCode.PULL_NOT_FOUND))
    assert from_remoting(65_000, "?").code == definition.Code.INTERNAL_SERVER_ERROR
    assert from_remoting(ResponseCode.NO_PERMISSION, "no").code == definition.Code.FORBIDDEN
