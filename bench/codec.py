"""Codec throughput on the send hot path, against the floor of bare json.loads + json.dumps.

Decodes N SEND_MESSAGE_V2 frames (JSON header with extFields a..n, realistic properties, 1 KiB
bodies) through FrameDecoder + decode_send_header, and encodes their responses (make_response +
encode_frame). The floor is json.loads of the same request headers plus json.dumps of the same
response header dicts: the work no JSON-header codec can avoid. Target: full <= 1.5x floor.

    .venv/bin/python bench/codec.py [--frames N] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import report
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.frame import FrameDecoder, encode_frame
from protocol.headers import SendMessageResponseHeader, decode_send_header
from protocol.properties import encode_properties


def build_requests(count: int) -> list[bytes]:
    frames = []
    for n in range(count):
        properties = encode_properties(
            {
                "TAGS": "TagA",
                "KEYS": f"order_{n}",
                "UNIQ_KEY": f"7F0000011A2B18B4AAC2{n:012X}",
                "WAIT": "true",
                "color": "blue",
            }
        )
        ext_fields = {
            "a": "bench_producer_group",
            "b": "BenchTopic",
            "c": "TBW102",
            "d": "4",
            "e": str(n % 4),
            "f": "0",
            "g": str(1795332302031 + n),
            "h": "0",
            "i": properties,
            "j": "0",
            "k": "false",
            "m": "false",
            "n": "broker-a",
        }
        request = RemotingCommand.request(
            RequestCode.SEND_MESSAGE_V2, ext_fields, bytes(1024), opaque=n
        )
        frames.append(encode_frame(request))
    return frames


def full_path(frames: list[bytes]) -> float:
    """Seconds to decode every frame and header, and encode every response."""
    decoder = FrameDecoder()
    started = time.perf_counter()
    out = []
    for frame in frames:
        for command in decoder.feed(frame):
            header = decode_send_header(command.code, command.ext_fields)
            ext = SendMessageResponseHeader(
                "7F00000100002A9F0000000000000000", header.queue_id, command.opaque
            ).to_ext_fields()
            ext["MSG_REGION"] = "DefaultRegion"
            ext["TRACE_ON"] = "true"
            out.append(encode_frame(command.make_response(ResponseCode.SUCCESS, None, ext)))
    return time.perf_counter() - started


def floor_path(headers: list[bytes], responses: list[dict[str, object]]) -> float:
    """Seconds for bare json.loads of each request header and json.dumps of each response."""
    loads, dumps = json.loads, json.dumps
    started = time.perf_counter()
    out = []
    for header, response in zip(headers, responses, strict=True):
        loads(header)
        out.append(dumps(response, separators=(",", ":")).encode())
    return time.perf_counter() - started


def floor_inputs(frames: list[bytes]) -> tuple[list[bytes], list[dict[str, object]]]:
    headers, responses = [], []
    for frame in frames:
        header_length = int.from_bytes(frame[4:8], "big") & 0xFFFFFF
        headers.append(frame[8 : 8 + header_length])
        opaque = json.loads(headers[-1])["opaque"]
        responses.append(
            {
                "code": 0,
                "extFields": {
                    "msgId": "7F00000100002A9F0000000000000000",
                    "queueId": "0",
                    "queueOffset": str(opaque),
                    "MSG_REGION": "DefaultRegion",
                    "TRACE_ON": "true",
                },
                "flag": 1,
                "language": "JAVA",
                "opaque": opaque,
                "serializeTypeCurrentRPC": "JSON",
                "version": 407,
            }
        )
    return headers, responses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    frames = build_requests(args.frames)
    headers, responses = floor_inputs(frames)
    # best of several rounds: the least disturbed by other processes on a shared machine
    full = min(full_path(frames) for _ in range(args.rounds))
    floor = min(floor_path(headers, responses) for _ in range(args.rounds))
    report(
        "codec_full",
        frames=args.frames,
        frames_per_s=args.frames / full,
        us_per_frame=1e6 * full / args.frames,
    )
    report(
        "codec_floor",
        frames=args.frames,
        frames_per_s=args.frames / floor,
        us_per_frame=1e6 * floor / args.frames,
    )
    report("codec_ratio", full_over_floor=full / floor, target=1.5)


if __name__ == "__main__":
    main()
