"""A real headless Chromium driven over the DevTools protocol, for the dashboard's tests.

Chromium is started with `--remote-debugging-pipe`: it reads protocol commands on its file
descriptor 3 and writes answers and events on 4, each a JSON text ended by a NUL byte. That
needs no driver package and opens no port; `Browser` is the few calls the tests use (open a
page, evaluate an expression, take a screenshot). The browser is Debian's `chromium` package,
installed for the tests by `tests/install-chromium.sh`.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import pathlib
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import trio

INSTALL_SCRIPT: Final = "tests/install-chromium.sh"
CANDIDATES: Final = ("chromium", "chromium-browser")
COMMAND_TIMEOUT_S: Final = 20.0


class BrowserError(Exception):
    """Chromium answered a command with an error, or could not be started."""


def chromium_path() -> str:
    """The system Chromium; AssertionError naming the install script when there is none."""
    for name in CANDIDATES:
        path = shutil.which(name)
        if path is not None:
            return path
    raise AssertionError(
        f"no chromium on PATH: the dashboard tests need a real headless browser; "
        f"run 'bash {INSTALL_SCRIPT}' (or 'make install-test')"
    )


class Browser:
    """One Chromium process; commands go out on `_commands`, answers come in on `_answers`."""

    def __init__(self, commands: trio.lowlevel.FdStream, answers: trio.lowlevel.FdStream) -> None:
        self._commands = commands
        self._answers = answers
        self._next_id = 0
        self._waiting: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}
        self._buffer = b""
        self._closed = False

    async def read_loop(self) -> None:
        """Hand each answer to the command waiting for it (events are not needed here)."""
        while True:
            chunk = await self._answers.receive_some(1 << 16)
            if not chunk:
                self._closed = True
                for channel in self._waiting.values():
                    channel.close()
                return
            self._buffer += chunk
            *messages, self._buffer = self._buffer.split(b"\0")
            for raw in messages:
                message = json.loads(raw)
                number = message.get("id")
                if isinstance(number, int) and number in self._waiting:  # else an event
                    self._waiting.pop(number).send_nowait(message)

    async def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        """The result of one protocol command; BrowserError with Chromium's message on error."""
        if self._closed:
            raise BrowserError("chromium has exited")
        self._next_id += 1
        command: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            command["sessionId"] = session
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        self._waiting[self._next_id] = send
        await self._commands.send_all(json.dumps(command).encode() + b"\0")
        with trio.fail_after(COMMAND_TIMEOUT_S):
            try:
                answer = await receive.receive()
            except trio.EndOfChannel:
                raise BrowserError(f"chromium exited during {method}") from None
        if "error" in answer:
            raise BrowserError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer.get("result", {})
        return result

    async def open_page(self, url: str, width: int = 1200, height: int = 900) -> Page:
        target = await self.send("Target.createTarget", {"url": "about:blank"})
        attached = await self.send(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
        )
        page = Page(self, str(attached["sessionId"]))
        await page.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        await page.send("Page.enable")
        await page.send("Page.navigate", {"url": url})
        return page


class Page:
    """One tab, reached through its flattened session."""

    def __init__(self, browser: Browser, session: str) -> None:
        self._browser = browser
        self._session = session

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self._browser.send(method, params, self._session)

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable)."""
        result = await self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def screenshot(self, path: pathlib.Path) -> int:
        """Save the whole page as a PNG; its size in bytes."""
        size = await self.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
        )
        shot = await self.send(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1},
            },
        )
        data = base64.b64decode(shot["data"])
        await trio.Path(path).write_bytes(data)
        return len(data)


def _high_fd(fd: int) -> int:
    """`fd` moved to a number above 10, so the shell's `3<&N 4>&M` cannot overwrite it."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


@asynccontextmanager
async def open_browser(profile: pathlib.Path) -> AsyncIterator[Browser]:
    """A headless Chromium with its profile in `profile`, killed on exit."""
    executable = chromium_path()
    to_chrome_r, to_chrome_w = (_high_fd(fd) for fd in os.pipe())
    from_chrome_r, from_chrome_w = (_high_fd(fd) for fd in os.pipe())
    flags = [
        "--headless=new",
        "--remote-debugging-pipe",
        "--no-sandbox",  # the tests run as root in containers
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--hide-scrollbars",
        "--font-render-hinting=none",
        f"--user-data-dir={profile}",
        "about:blank",
    ]
    # bash puts the pipes on the descriptors Chromium reads (3) and writes (4); dash would
    # refuse descriptors above 9.
    process = await trio.lowlevel.open_process(
        ["bash", "-c", f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}', executable, *flags],
        pass_fds=(to_chrome_r, from_chrome_w),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(to_chrome_r)
    os.close(from_chrome_w)
    commands = trio.lowlevel.FdStream(to_chrome_w)
    answers = trio.lowlevel.FdStream(from_chrome_r)
    browser = Browser(commands, answers)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(browser.read_loop)
            try:
                await browser.send("Browser.getVersion")
                yield browser
            finally:
                nursery.cancel_scope.cancel()
    finally:
        process.kill()
        await process.wait()
        await commands.aclose()
        await answers.aclose()
