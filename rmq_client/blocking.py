"""`BlockingProducer`: the producer of `rmq_client.producer` for code without Trio.

A helper thread runs a Trio loop holding one `open_producer` connection; each call is handed to
that loop with `trio.from_thread.run` and waits for its answer, so plain threads (scripts, test
harnesses of other teams, a REPL) send with the same calls and the same errors.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import trio

from rmq_client.producer import Message, Producer, SendResult, open_producer


class BlockingProducer:
    """`Producer` for code without Trio: a helper thread runs the loop and the connection."""

    def __init__(self, host: str, port: int, **kwargs: Any) -> None:
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._producer: Producer | None = None
        self._thread = threading.Thread(
            target=trio.run, args=(self._main, host, port, kwargs), daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    async def _main(self, host: str, port: int, kwargs: dict[str, Any]) -> None:
        try:
            async with open_producer(host, port, **kwargs) as producer:
                self._producer = producer
                self._stop = trio.Event()
                self._token = trio.lowlevel.current_trio_token()
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def send(self, message: Message, timeout_s: float | None = None) -> SendResult:
        assert self._producer is not None
        result: SendResult = self._call(self._producer.send, message, timeout_s)
        return result

    def send_batch(self, messages: Sequence[Message], timeout_s: float | None = None) -> SendResult:
        assert self._producer is not None
        result: SendResult = self._call(self._producer.send_batch, messages, timeout_s)
        return result

    def send_oneway(self, message: Message) -> None:
        assert self._producer is not None
        self._call(self._producer.send_oneway, message)

    def close(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join()

    def __enter__(self) -> BlockingProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
