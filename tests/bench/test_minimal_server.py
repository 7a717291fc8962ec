"""bench/minimal_server.py, the send bench's floor, as a real process over real sockets.

Its replies are read with the project's own frame decoder and send-response header, so a canned
reply that a client could not match (wrong opaque, no response flag, a missing field) or a burst
answered short fails here, not as a slow-looking bench row.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from itertools import accumulate
from pathlib import Path
from typing import Final

import pytest

from bench._loadgen import Load, Target, remoting_frames, run_share
from bench.minimal_server import answer
from protocol.codes import RequestCode, SerializeType
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder, encode_frame
from protocol.headers import SendMessageResponseHeader

SERVER: Final = Path(__file__).resolve().parents[2] / "bench" / "minimal_server.py"
READY: Final = "minimal server listening on "


class Minimal:
    """The server as a subprocess on a free port, read from its ready line."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER), "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith(READY), line
        self.port = int(line.strip().rpartition(":")[2])

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()


@pytest.fixture(scope="module")
def minimal() -> Iterator[Minimal]:
    server = Minimal()
    yield server
    server.stop()


def request(opaque: int, ext_fields: dict[str, str] | None = None) -> bytes:
    fields = {"b": "BenchTopic", "e": "1"} if ext_fields is None else ext_fields
    command = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, fields, b"x" * 300, opaque=opaque
    )
    return encode_frame(command)


def read_replies(sock: socket.socket, decoder: FrameDecoder, count: int) -> list[RemotingCommand]:
    replies: list[RemotingCommand] = []
    while len(replies) < count:
        data = sock.recv(65536)
        assert data, f"connection closed after {len(replies)} of {count} replies"
        replies += decoder.feed(data)
    assert len(replies) == count, "more replies than requests"
    return replies


def assert_success(replies: list[RemotingCommand], opaques: list[int]) -> None:
    assert [reply.opaque for reply in replies] == opaques
    for reply in replies:
        assert (reply.code, reply.is_response, reply.is_oneway) == (0, True, False)
        assert reply.serialize_type is SerializeType.JSON
        header = SendMessageResponseHeader.from_ext_fields(reply.ext_fields)
        assert header.msg_id and header.queue_offset >= 0


#: opaques over the int32 range, and headers where a careless search finds the wrong opaque
BURST: Final = [
    (0, None),
    (1, {"opaque": "42"}),
    (-7, {"i": 'KEYS\x01"opaque":99'}),
    (2_147_483_647, None),
    (-2_147_483_648, {"b": "BenchTopic", "opaque": "-1"}),
    (123_456, None),
    (5, None),
]


def test_a_pipelined_burst_split_across_writes_gets_one_reply_per_request(
    minimal: Minimal,
) -> None:
    frames = [request(opaque, fields) for opaque, fields in BURST]
    stream = b"".join(frames)
    ends = list(accumulate(len(frame) for frame in frames))
    starts = [0, *ends[:-1]]
    # cut inside frame 2's length prefix, inside frame 4's header and inside frame 5's body
    cuts = [starts[2] + 3, starts[4] + 40, ends[5] - 100, ends[-1]]
    decoder = FrameDecoder()
    opaques = [opaque for opaque, _ in BURST]
    with minimal.connect() as sock:
        sent, answered = 0, 0
        for cut in cuts:
            sock.sendall(stream[sent:cut])
            whole = sum(1 for end in ends if end <= cut)
            # the replies to the frames before the cut arrive before the rest is written, so
            # the server saw the cut frame's first part in a receive of its own
            assert_success(read_replies(sock, decoder, whole - answered), opaques[answered:whole])
            sent, answered = cut, whole
        # nothing extra was queued behind the burst: the next reply is the next request's
        sock.sendall(request(77))
        assert_success(read_replies(sock, decoder, 1), [77])


def test_the_bench_frames_are_answered_and_its_generator_counts_every_reply(
    minimal: Minimal,
) -> None:
    frames = remoting_frames(3, 1024)[:64]
    with minimal.connect() as sock:
        sock.sendall(b"".join(frames))
        assert_success(read_replies(sock, FrameDecoder(), 64), list(range(64)))
    load = Load(connections=2, window=16, body_size=1024, duration_s=0.3, warmup_s=0.1)
    result = run_share(
        Target("remoting", "127.0.0.1", minimal.port), load, [0, 1], time.monotonic()
    )
    assert (result.failed, result.unanswered, result.first_failure) == (0, 0, "")
    assert result.replies >= result.acked > 0


BAD_FRAMES: Final = {
    "binary header": encode_frame(
        RemotingCommand.request(
            RequestCode.SEND_MESSAGE_V2, {"b": "T"}, b"x", serialize_type=SerializeType.ROCKETMQ
        )
    ),
    "no opaque": b"\x00\x00\x00\x0e\x00\x00\x00\x0a" + b'{"code":1}',
    "header longer than the frame": b"\x00\x00\x00\x08\x00\x00\x00\x20" + b"{}{}",
    "length beyond the limit": b"\x7f\x00\x00\x00\x00\x00\x00\x02{}",
}


@pytest.mark.parametrize("bad", BAD_FRAMES.values(), ids=BAD_FRAMES.keys())
def test_a_frame_it_cannot_answer_closes_only_its_connection_after_the_replies_before_it(
    minimal: Minimal, bad: bytes
) -> None:
    decoder = FrameDecoder()
    with minimal.connect() as sock:
        sock.sendall(request(1) + request(2) + bad + request(3))
        assert_success(read_replies(sock, decoder, 2), [1, 2])
        assert sock.recv(65536) == b""
    with minimal.connect() as other:
        other.sendall(request(4))
        assert_success(read_replies(other, FrameDecoder(), 1), [4])


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_it_with_status_0_while_a_connection_is_open(signum: int) -> None:
    server = Minimal()
    try:
        with server.connect() as sock:
            sock.sendall(request(9))
            assert_success(read_replies(sock, FrameDecoder(), 1), [9])
            server.process.send_signal(signum)
            assert server.process.wait(timeout=10) == 0
    finally:
        server.stop()


def test_answer_takes_whole_frames_only_wherever_the_bytes_stop() -> None:
    frames = [request(opaque, fields) for opaque, fields in BURST[:3]]
    stream = b"".join(frames)
    ends = list(accumulate(len(frame) for frame in frames))
    for cut in range(len(stream) + 1):
        replies, used, error = answer(stream[:cut])
        whole = sum(1 for end in ends if end <= cut)
        assert error is None
        assert used == (ends[whole - 1] if whole else 0)
        decoded = FrameDecoder().feed(replies)
        assert [reply.opaque for reply in decoded] == [opaque for opaque, _ in BURST[:whole]]
