"""Coverage-guided fuzzing of the codecs with atheris (libFuzzer), for a bounded time:

    .venv/bin/python tests/protocol/atheris_codecs.py -max_total_time=60

`tests/protocol/test_atheris.py` runs it for a bounded number of inputs in `make test`.

One input drives the frame decoder (fed whole and in two pieces), then the send-header parser,
the properties parser and the batch-body splitter on what decoded. Only the protocol's own errors
may come out; anything else is a crash that libFuzzer reports with the input that caused it.
"""

from __future__ import annotations

import contextlib
import sys

import atheris  # type: ignore[import-untyped]

with atheris.instrument_imports():
    from protocol.batch import decode_batch_body
    from protocol.errors import HeaderFieldError, RemotingProtocolError
    from protocol.frame import FrameDecoder
    from protocol.headers import decode_send_header
    from protocol.properties import decode_properties


def one_input(data: bytes) -> None:
    split = data[0] % (len(data) + 1) if data else 0
    decoder = FrameDecoder(max_frame_length=1 << 16)
    commands = []
    with contextlib.suppress(RemotingProtocolError):
        commands += decoder.feed(data[1 : split + 1])
        commands += decoder.feed(data[split + 1 :])
    for command in commands:
        with contextlib.suppress(HeaderFieldError):
            header = decode_send_header(command.code, command.ext_fields)
            decode_properties(header.properties or "")
        with contextlib.suppress(HeaderFieldError):
            decode_batch_body(command.body or b"")
    with contextlib.suppress(HeaderFieldError):
        decode_batch_body(data)


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
