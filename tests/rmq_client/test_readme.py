"""The README's Python client examples are run as written (only the port changes), in order and
in one namespace, against a real broker process; what they print and leave behind is checked."""

from __future__ import annotations

import ast
import inspect
import pathlib
import re
from typing import Any, Final

import pytest
import trio

from rmq_client import SendStatus, TransactionState
from tests.daemon import Daemon

README: Final = pathlib.Path(__file__).resolve().parents[2] / "README.md"
SECTION: Final = "## Python client"


def examples() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", len(SECTION))]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)


def run_example(source: str, namespace: dict[str, Any]) -> None:
    """Run `source` as a script would, or with top-level `await` under Trio if it has one."""
    code = compile(source, str(README), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if not code.co_flags & inspect.CO_COROUTINE:
        exec(code, namespace)
        return

    async def run() -> None:
        with trio.fail_after(60):
            await eval(code, namespace)

    trio.run(run)


def test_the_readme_starts_with_make_run_and_make_test() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "```sh"
    assert [line.split()[:2] for line in lines[1:3]] == [["make", "run"], ["make", "test"]]


def test_the_readme_client_examples_run(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = examples()
    assert len(blocks) == 4
    daemon = Daemon(tmp_path / "store")
    namespace: dict[str, Any] = {"__name__": "readme"}
    try:
        for block in blocks:
            assert "10911" in block
            run_example(block.replace("10911", str(daemon.port)), namespace)
    finally:
        daemon.stop()
    printed = capsys.readouterr().out.splitlines()
    sent, blocking, pulled, handled = printed
    assert sent.startswith(f"{SendStatus.SEND_OK} ")
    assert sent.endswith(" 0 0")  # queue 0, its first offset
    assert blocking == str(SendStatus.SEND_OK)
    assert pulled == "0 b'hello'"
    assert handled == "Orders TagA b'hello' 0"
    assert namespace["state"] is TransactionState.COMMIT
    assert namespace["sent"].status is SendStatus.SEND_OK
