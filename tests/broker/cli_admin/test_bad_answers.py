"""A server that answers admin requests with bodies that are not what 4.9 sends: each command
ends in one line naming the server, exit code 1, never a traceback."""

from __future__ import annotations

import pytest
import trio

from protocol.codes import ResponseCode
from protocol.frame import FrameDecoder, encode_frame
from tests.broker.cli_admin.support import admin

BODIES = [b"not json", b'{"offsetTable": 5}', b"[1, 2", b"\xff\xfe"]


async def answer_with(body: bytes, stream: trio.SocketStream) -> None:
    decoder = FrameDecoder()
    async with stream:
        while data := await stream.receive_some(65536):
            for request in decoder.feed(data):
                response = request.make_response(ResponseCode.SUCCESS, body=body)
                await stream.send_all(encode_frame(response))


@pytest.mark.parametrize("body", BODIES)
async def test_a_garbled_answer_is_one_line(nursery: trio.Nursery, body: bytes) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def serve(stream: trio.SocketStream) -> None:
        await answer_with(body, stream)

    nursery.start_soon(trio.serve_listeners, serve, listeners)
    here = f"127.0.0.1:{port}"
    for args in (
        ("clusterList", "-n", here),
        ("consumerProgress", "-b", here, "-g", "g"),
        ("topicStatus", "-b", here, "-t", "T"),
        ("brokerStatus", "-b", here, "--json"),
    ):
        if body.startswith(b"{") and args[0] == "brokerStatus":
            continue  # a JSON object without "table" is an empty table, as fastjson reads it
        line = (await admin(*args)).error_line(1)
        assert here in line, line
    nursery.cancel_scope.cancel()
