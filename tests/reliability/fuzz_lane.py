"""A blocking loopback connection for the request fuzzer: write a script, collect its answers.

`Lane.exchange` writes the frames of one script in a single `sendall` and reads until every
request that wants an answer has one. Pulls may be suspended by the broker (long polling), so
their answers may come during later scripts on the same lane; each has its own deadline
(`SUSPEND_DEADLINE_S`, above the broker's longest suspension), checked at every exchange. Any
answer that does not come in time, or a connection the broker closes while answers are due,
raises `AssertionError`.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Iterator, Sequence

from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemotingProtocolError
from protocol.frame import FrameDecoder
from protocol.msgid import decode_offset_msg_id
from tests.reliability.request_script import Request

ANSWER_DEADLINE_S = 15.0
SUSPEND_DEADLINE_S = 45.0


class Lane:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_DEADLINE_S)
        self.decoder = FrameDecoder()
        #: opaque -> (deadline, request code, whether the broker may suspend it)
        self.pending: dict[int, tuple[float, int, bool]] = {}
        self.closed = False

    @property
    def suspended(self) -> int:
        return sum(1 for _deadline, _code, suspends in self.pending.values() if suspends)

    def exchange(self, requests: Sequence[Request]) -> Iterator[tuple[int, RemotingCommand]]:
        """Send `requests`; yield (request code or -1, answer) until the due answers are in."""
        now = time.monotonic()
        for request in requests:
            if request.expects_answer:
                deadline = now + (SUSPEND_DEADLINE_S if request.suspends else ANSWER_DEADLINE_S)
                self.pending[request.opaque] = (deadline, request.code, request.suspends)
        try:
            self.sock.sendall(b"".join(r.frame for r in requests))
        except (BrokenPipeError, ConnectionResetError):
            self.closed = True  # closed on an earlier corrupt frame: checked below
        yield from self._collect()

    def _due(self) -> bool:
        return any(not suspends for _deadline, _code, suspends in self.pending.values())

    def _collect(self) -> Iterator[tuple[int, RemotingCommand]]:
        while self._due() or self._expired():
            self._check_deadlines()
            if self.closed:
                raise AssertionError(f"connection closed with answers due: {self._describe()}")
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                continue
            except ConnectionResetError:
                data = b""
            if not data:
                self.closed = True
                continue
            yield from self._answers(data)
        # Answers that are already here (suspended pulls that ended) are taken without waiting.
        self.sock.setblocking(False)
        try:
            while data := self.sock.recv(1 << 16):
                yield from self._answers(data)
            self.closed = True
        except (BlockingIOError, ConnectionResetError):
            pass
        finally:
            self.sock.settimeout(ANSWER_DEADLINE_S)

    def _answers(self, data: bytes) -> Iterator[tuple[int, RemotingCommand]]:
        try:
            commands = self.decoder.feed(data)
        except RemotingProtocolError as exc:
            raise AssertionError(f"the broker wrote a bad frame: {exc}") from exc
        for command in commands:
            if command.is_oneway and command.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
                continue  # a consumer group's members changed: 4.9 tells each member, unasked
            assert command.is_response, f"the broker sent a request: {command}"
            _deadline, code, _suspends = self.pending.pop(command.opaque, (0.0, -1, False))
            yield code, command

    def _expired(self) -> bool:
        now = time.monotonic()
        return any(deadline < now for deadline, _code, _s in self.pending.values())

    def _check_deadlines(self) -> None:
        if self._expired():
            raise AssertionError(f"no answer in time: {self._describe()}")

    def _describe(self) -> str:
        return ", ".join(
            f"{RequestCode.name_of(code)}#{opaque}"
            for opaque, (_d, code, _s) in sorted(self.pending.items())
        )

    def close(self) -> None:
        self.pending.clear()
        self.sock.close()


class Caller:
    """One request at a time on its own connection, for the health check."""

    def __init__(self, port: int, timeout_s: float) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.decoder = FrameDecoder()
        self.opaque = 0

    def call(self, code: int, fields: dict[str, str], body: bytes = b"") -> RemotingCommand:
        self.opaque += 1
        header = json.dumps(
            {"code": code, "flag": 0, "language": "JAVA", "opaque": self.opaque,
             "serializeTypeCurrentRPC": "JSON", "version": 401, "extFields": fields}
        ).encode()  # fmt: skip
        self.sock.sendall(struct.pack(">ii", 4 + len(header) + len(body), len(header)))
        self.sock.sendall(header + body)
        while True:
            data = self.sock.recv(1 << 16)
            assert data, f"the broker closed the health check's connection ({code})"
            for answer in self.decoder.feed(data):
                if answer.opaque == self.opaque:
                    return answer

    def close(self) -> None:
        self.sock.close()


def expect(answer: RemotingCommand, what: str, *codes: int) -> RemotingCommand:
    assert answer.code in (codes or (ResponseCode.SUCCESS,)), (
        f"{what} was answered {answer.code} {answer.remark}"
    )
    return answer


def healthy_broker(port: int, timeout_s: float, topic: str = "T0") -> float:
    """Seconds a round of valid requests on a new connection takes, each answered as it should:
    a send acknowledged, a consumer registered and listed, a pull served, a send-back taken, an
    offset committed and read back. Each touches a table the fuzz scripts share."""
    started = time.monotonic()
    caller = Caller(port, timeout_s)
    group, client = "HealthGroup", "127.0.0.1@health"
    try:
        sent = expect(
            caller.call(
                RequestCode.SEND_MESSAGE_V2,
                {
                    "a": "healthy",
                    "b": topic,
                    "c": "TBW102",
                    "d": "4",
                    "e": "0",
                    "f": "0",
                    "g": str(int(time.time() * 1000)),
                    "h": "0",
                    "i": "KEYS\x01healthy",
                    "j": "0",
                    "k": "false",
                    "m": "false",
                },
                b"healthy",
            ),
            "a valid send",
        )
        heartbeat = {
            "clientID": client,
            "producerDataSet": [],
            "consumerDataSet": [
                {"groupName": group, "consumeType": "CONSUME_PASSIVELY",
                 "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                 "unitMode": False,
                 "subscriptionDataSet": [{"topic": topic, "subString": "*", "subVersion": 1}]}
            ],
        }  # fmt: skip
        expect(caller.call(RequestCode.HEART_BEAT, {}, json.dumps(heartbeat).encode()), "heartbeat")
        listed = expect(
            caller.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}),
            "the consumer list",
        )
        assert client in (listed.body or b"").decode(), listed.body
        queue_offset = sent.ext_fields["queueOffset"]
        pull = {"consumerGroup": group, "topic": topic, "queueId": "0",
                "queueOffset": queue_offset, "maxMsgNums": "1", "sysFlag": "0",
                "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "1"}  # fmt: skip
        # Under ASYNC_FLUSH a send is answered before the consume queue has it: wait for it.
        while True:
            bounds = caller.call(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": "0"})
            if int(expect(bounds, "a max offset").ext_fields["offset"]) > int(queue_offset):
                break
            assert time.monotonic() - started < timeout_s, "the sent message never reached a queue"
            time.sleep(0.01)
        expect(caller.call(RequestCode.PULL_MESSAGE, pull), "a pull of the sent message")
        offset = str(decode_offset_msg_id(sent.ext_fields["msgId"])[2])
        back = {"offset": offset, "group": group, "delayLevel": "0", "maxReconsumeTimes": "2"}
        expect(caller.call(RequestCode.CONSUMER_SEND_MSG_BACK, back), "a send-back")
        commit = {"consumerGroup": group, "topic": topic, "queueId": "0",
                  "commitOffset": str(int(queue_offset) + 1)}  # fmt: skip
        expect(caller.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit), "an offset commit")
        del commit["commitOffset"]
        read = expect(caller.call(RequestCode.QUERY_CONSUMER_OFFSET, commit), "an offset query")
        assert int(read.ext_fields["offset"]) >= int(queue_offset) + 1, read.ext_fields
    finally:
        caller.close()
    elapsed = time.monotonic() - started
    assert elapsed < timeout_s, f"a round of valid requests took {elapsed:.2f} s"
    return elapsed
