"""`BlockingProducer`: the producer of `rmq_client.producer` for code without Trio.

A helper thread runs a Trio loop holding one connection (`LoopThread`); each call is handed to
that loop with `trio.from_thread.run` and waits for its answer, so plain threads (scripts, test
harnesses of other teams, a REPL) send with the same calls and the same errors.
`rmq_client.blocking_consumer.BlockingConsumer` receives the same way.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Any, Generic, Self, TypeVar

import trio

from rmq_client.producer import Message, Producer, SendResult, open_producer

C = TypeVar("C")
T = TypeVar("T")


class LoopThread(Generic[C]):
    """A helper thread whose Trio loop holds the connection `connect()` opens, until `close()`.
    A connection that cannot be opened raises its error from the constructor."""

    def __init__(self, connect: Callable[[], AbstractAsyncContextManager[C]]) -> None:
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._connection: C | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._main, connect), daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    async def _main(self, connect: Callable[[], AbstractAsyncContextManager[C]]) -> None:
        try:
            async with connect() as connection:
                self._connection = connection
                self._stop = trio.Event()
                self._token = trio.lowlevel.current_trio_token()
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    @property
    def connection(self) -> C:
        assert self._connection is not None
        return self._connection

    def _call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        if not self._thread.is_alive():
            raise RuntimeError(f"the {type(self).__name__} is closed")
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def close(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BlockingProducer(LoopThread[Producer]):
    """`Producer` for code without Trio: a helper thread runs the loop and the connection."""

    def __init__(self, host: str, port: int, **kwargs: Any) -> None:
        super().__init__(partial(open_producer, host, port, **kwargs))

    def send(self, message: Message, timeout_s: float | None = None) -> SendResult:
        return self._call(self.connection.send, message, timeout_s)

    def send_batch(self, messages: Sequence[Message], timeout_s: float | None = None) -> SendResult:
        return self._call(self.connection.send_batch, messages, timeout_s)

    def send_oneway(self, message: Message) -> None:
        self._call(self.connection.send_oneway, message)
