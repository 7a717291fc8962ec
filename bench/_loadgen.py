"""Pipelined send load over plain sockets: pre-encoded requests, response parsing, latencies.

Two wire dialects share one event loop: RocketMQ remoting (SEND_MESSAGE_V2 frames, responses
matched by opaque) and RESP (Redis XADD, replies in request order). The frames are encoded once,
before the clock starts, so a generator process spends its time in `send`, `recv` and a cheap
scan of the replies. Each process drives its share of the connections with a `selectors` loop;
no trio here, so the generator stays light next to the server it measures on the same cores.
Nothing here knows how the server was started (`_loadgen_servers.py`) or what the rows are.
"""

from __future__ import annotations

import re
import selectors
import socket
import time
from array import array
from collections import deque
from dataclasses import dataclass
from typing import Final, Literal

from protocol.codes import RequestCode
from protocol.command import RemotingCommand
from protocol.frame import encode_frame
from protocol.properties import encode_properties

Dialect = Literal["remoting", "resp"]

#: pre-encoded remoting requests per connection; opaques cycle through them, so it must stay
#: well above the window for an opaque to identify one in-flight request
RING: Final = 1024
#: queues a producer spreads over (the client default for an auto-created topic)
QUEUES: Final = 4
TOPIC: Final = "BenchTopic"
_OPAQUE = re.compile(rb'"opaque"\s*:\s*(-?\d+)')
_CODE = re.compile(rb'"code"\s*:\s*(-?\d+)')
_RECV: Final = 1 << 18


@dataclass(frozen=True, slots=True)
class Target:
    dialect: Dialect
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class Load:
    """P connections x W requests in flight, measured for `duration_s` after `warmup_s`."""

    connections: int
    window: int
    body_size: int
    duration_s: float
    warmup_s: float


@dataclass(frozen=True, slots=True)
class ShareResult:
    """What one generator process saw; `acked` and latencies (microseconds) inside the window
    only, `replies` over the whole run (warm-up and drain too, for CPU cost per message)."""

    acked: int
    replies: int
    failed: int
    unanswered: int
    first_failure: str
    latencies_us: bytes  # array('d') bytes: cheap to pickle back to the parent


def remoting_frames(connection: int, body_size: int) -> list[bytes]:
    """RING SEND_MESSAGE_V2 frames as the Java 4.9 client writes them, opaques 0..RING-1."""
    body = bytes((n * 7 + connection) & 0xFF for n in range(body_size))
    born = int(time.time() * 1000)
    frames = []
    for opaque in range(RING):
        properties = encode_properties(
            {
                "TAGS": "TagA",
                "KEYS": f"order_{connection}_{opaque}",
                "UNIQ_KEY": f"7F000001{connection:04X}18B4AAC2{opaque:012X}",
                "WAIT": "true",
            }
        )
        ext_fields = {
            "a": "bench_producer_group",
            "b": TOPIC,
            "c": "TBW102",
            "d": str(QUEUES),
            "e": str(connection % QUEUES),
            "f": "0",
            "g": str(born + opaque),
            "h": "0",
            "i": properties,
            "j": "0",
            "k": "false",
            "m": "false",
            "n": "broker-a",
        }
        command = RemotingCommand.request(
            RequestCode.SEND_MESSAGE_V2, ext_fields, body, opaque=opaque
        )
        frames.append(encode_frame(command))
    return frames


def resp_xadd(connection: int, body_size: int) -> bytes:
    """One RESP `XADD bench:<queue> * b <body>` command; every request on a connection is alike."""
    body = bytes((n * 7 + connection) & 0xFF for n in range(body_size))
    parts = [b"XADD", f"bench:{connection % QUEUES}".encode(), b"*", b"b", body]
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(part), part))
    return b"".join(out)


class _Conn:
    """One connection's buffers and in-flight bookkeeping."""

    __slots__ = ("frames", "inbox", "index", "next_seq", "outbox", "pending", "sent_at", "sock")

    def __init__(self, sock: socket.socket, index: int, frames: list[bytes]) -> None:
        self.sock = sock
        self.index = index
        self.frames = frames
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.next_seq = 0
        self.sent_at: list[float] = [0.0] * len(frames)  # by opaque (remoting)
        self.pending: deque[float] = deque()  # send times in order (RESP)


class Share:
    """The event loop of one generator process over its connections; connected and with its
    requests encoded on construction, so `run` starts sending at once."""

    def __init__(self, target: Target, load: Load, indexes: list[int]) -> None:
        self.target = target
        self.load = load
        self.selector = selectors.DefaultSelector()
        self.conns = [self._connect(i) for i in indexes]
        self.latencies = array("d")
        self.acked = 0
        self.replies = 0
        self.failed = 0
        self.first_failure = ""
        self.in_flight = 0
        self.window_start = 0.0
        self.window_end = 0.0

    def _connect(self, index: int) -> _Conn:
        sock = socket.create_connection((self.target.host, self.target.port), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        if self.target.dialect == "remoting":
            frames = remoting_frames(index, self.load.body_size)
        else:
            frames = [resp_xadd(index, self.load.body_size)]
        conn = _Conn(sock, index, frames)
        self.selector.register(sock, selectors.EVENT_READ, conn)
        return conn

    def run(self, start_at: float) -> ShareResult:
        while (delay := start_at - time.monotonic()) > 0:
            time.sleep(delay)
        self.window_start = start_at + self.load.warmup_s
        self.window_end = self.window_start + self.load.duration_s
        for conn in self.conns:
            for _ in range(self.load.window):
                self._queue_request(conn, time.monotonic())
            self._flush(conn)
        drain_deadline = self.window_end + 15.0
        while self.in_flight and time.monotonic() < drain_deadline:
            for key, events in self.selector.select(timeout=0.5):
                conn = key.data
                if events & selectors.EVENT_READ:
                    self._receive(conn)
                if events & selectors.EVENT_WRITE:
                    self._flush(conn)
        for conn in self.conns:
            conn.sock.close()
        return ShareResult(
            self.acked,
            self.replies,
            self.failed,
            self.in_flight,
            self.first_failure,
            self.latencies.tobytes(),
        )

    def _queue_request(self, conn: _Conn, now: float) -> None:
        if self.target.dialect == "remoting":
            slot = conn.next_seq % RING
            conn.sent_at[slot] = now
            conn.outbox += conn.frames[slot]
        else:
            conn.pending.append(now)
            conn.outbox += conn.frames[0]
        conn.next_seq += 1
        self.in_flight += 1

    def _flush(self, conn: _Conn) -> None:
        try:
            sent = conn.sock.send(conn.outbox)
        except BlockingIOError:
            sent = 0
        del conn.outbox[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbox else 0)
        self.selector.modify(conn.sock, events, conn)

    def _receive(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(_RECV)
        except BlockingIOError:
            return
        if not data:
            raise ConnectionError(f"server closed connection {conn.index}")
        conn.inbox += data
        now = time.monotonic()
        if self.target.dialect == "remoting":
            replies = self._parse_remoting(conn, now)
        else:
            replies = self._parse_resp(conn, now)
        if replies and now < self.window_end:
            for _ in range(replies):
                self._queue_request(conn, now)
            self._flush(conn)

    def _complete(self, sent_at: float, now: float, ok: bool, reply: bytes) -> None:
        self.in_flight -= 1
        self.replies += 1
        if not ok:
            self.failed += 1
            self.first_failure = self.first_failure or reply[:300].decode(errors="replace")
        elif self.window_start <= now <= self.window_end:
            self.acked += 1
            self.latencies.append((now - sent_at) * 1e6)

    def _parse_remoting(self, conn: _Conn, now: float) -> int:
        inbox, pos, count = conn.inbox, 0, 0
        while len(inbox) - pos >= 8:
            length = int.from_bytes(inbox[pos : pos + 4], "big")
            if len(inbox) - pos < 4 + length:
                break
            header_length = int.from_bytes(inbox[pos + 5 : pos + 8], "big")
            header = bytes(inbox[pos + 8 : pos + 8 + header_length])
            pos += 4 + length
            opaque, code = _OPAQUE.search(header), _CODE.search(header)
            if opaque is None or code is None:
                raise ConnectionError(f"unreadable response header {header[:200]!r}")
            slot = int(opaque.group(1)) % RING
            self._complete(conn.sent_at[slot], now, int(code.group(1)) == 0, header)
            count += 1
        del inbox[:pos]
        return count

    def _parse_resp(self, conn: _Conn, now: float) -> int:
        inbox, pos, count = conn.inbox, 0, 0
        while (line_end := inbox.find(b"\r\n", pos)) >= 0:
            kind = inbox[pos]
            end = line_end + 2
            if kind == ord("$"):
                size = int(inbox[pos + 1 : line_end])
                if size >= 0:
                    end += size + 2
                    if end > len(inbox):
                        break
            reply = bytes(inbox[pos:end])
            self._complete(conn.pending.popleft(), now, kind == ord("$"), reply)
            pos = end
            count += 1
        del inbox[:pos]
        return count


def run_share(target: Target, load: Load, indexes: list[int], start_at: float) -> ShareResult:
    """Connect `indexes`, start sending at `start_at` (time.monotonic), return what came back.

    Raises OSError if a connection fails and ConnectionError if the server closes one or sends
    an unreadable reply: the row is then void, not slow.
    """
    return Share(target, load, indexes).run(start_at)
