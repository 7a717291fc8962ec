"""The delay levels' progress between a master and its slave (RocketMQ 4.9's
GET_ALL_DELAY_OFFSET and `SlaveSynchronize.syncDelayOffset`).

The master answers with its `delayOffset.json` content as 4.9 writes it (fastjson, level keys
unquoted: `{"offsetTable":{1:5,2:0}}`); the slave takes the table over, so that a slave later
started as a master does not deliver again what its master delivered already. Bad bodies raise
ValueError naming what was wrong.
"""

from __future__ import annotations

from broker.processors import RequestContext
from protocol import fastjson
from protocol.codes import ResponseCode
from protocol.command import RemotingCommand


def encode_delay_offsets(offsets: dict[int, int]) -> bytes:
    return fastjson.dumps({"offsetTable": dict(sorted(offsets.items()))}).encode()


def decode_delay_offsets(body: bytes | None) -> dict[int, int]:
    """The level -> offset table of a GET_ALL_DELAY_OFFSET answer; ValueError when malformed."""
    value = fastjson.loads(body or b"")
    table = value.get("offsetTable") if isinstance(value, dict) else None
    if not isinstance(table, dict):
        raise ValueError("delay offsets: no offsetTable object")
    offsets: dict[int, int] = {}
    for level, offset in table.items():
        try:
            number = int(level)
        except (TypeError, ValueError):
            raise ValueError(f"delay offsets: level {level!r} is not a number") from None
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0 or number < 1:
            raise ValueError(f"delay offsets: bad entry {level!r}: {offset!r}")
        offsets[number] = offset
    return offsets


class GetAllDelayOffsetProcessor:
    """GET_ALL_DELAY_OFFSET (45): the delay levels' next offsets."""

    async def process(self, request: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        body = encode_delay_offsets(ctx.broker.admin.schedule_offsets())
        return request.make_response(ResponseCode.SUCCESS, body=body)
