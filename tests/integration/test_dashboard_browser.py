"""The dashboard page in a real headless Chromium against a broker daemon with traffic.

The test reads what a person reads (the text of the rendered tables, not the JSON), while the
project's pull client consumes: a group's lag appears, falls as one queue is consumed and
reaches 0. Set `DASHBOARD_SCREENSHOT=docs/dashboard.png` to refresh the README's picture.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
import trio

from rmq_client.producer import Message, open_producer
from rmq_client.pull_consumer import PullConsumer, open_pull_consumer
from tests.browser import Page, chromium_path, open_browser
from tests.daemon import Daemon

TOPIC = "DashOrders"
GROUP = "dash-group"
#: queues the topic is created with (the client's default), of which the test fills USED
QUEUES = 4
USED = 3
PER_QUEUE = 10
#: messages sent once the page shows lag 0, to the empty queue
LATE = 5
WAIT_S = 15.0

ROWS_JS = """[...document.querySelectorAll('#%s tbody tr')].map(
    r => [...r.cells].map(c => c.innerText.trim()))"""


async def rows(page: Page, table: str) -> list[list[str]]:
    value = await page.evaluate(ROWS_JS % table)
    assert isinstance(value, list)
    return value


async def facts(page: Page, dl: str) -> dict[str, str]:
    """A <dl> as the page shows it: term -> description."""
    value = await page.evaluate(
        f"Object.fromEntries([...document.querySelectorAll('#{dl} dt')].map("
        "dt => [dt.innerText.trim(), dt.nextElementSibling.innerText.trim()]))"
    )
    assert isinstance(value, dict)
    return value


async def until(
    page: Page, read: Callable[[Page], Any], wanted: Callable[[Any], bool], what: str
) -> Any:
    """Poll what the page shows until `wanted(it)`; AssertionError with the last view."""
    seen: Any = None
    with trio.move_on_after(WAIT_S):
        while True:
            seen = await read(page)
            if wanted(seen):
                return seen
            await trio.sleep(0.2)
    status = await page.evaluate("document.getElementById('status').innerText")
    raise AssertionError(f"the page never showed {what}: last {seen!r}, status {status!r}")


def group_row(table: list[list[str]]) -> list[str] | None:
    return next((row for row in table if row and row[0] == GROUP), None)


def lag_shown(table: list[list[str]]) -> int | None:
    row = group_row(table)
    return int(row[5].replace(",", "")) if row else None


def sent_shown(table: list[list[str]]) -> float:
    row = group_row(table)
    return float(row[6]) if row and row[6] != "–" else 0.0


async def group_rows(page: Page) -> list[list[str]]:
    return await rows(page, "groups-table")


async def consume_queue(consumer: PullConsumer, queue_id: int) -> int:
    result = await consumer.pull(TOPIC, queue_id, 0, max_nums=PER_QUEUE)
    assert len(result.records) == PER_QUEUE
    await consumer.commit(TOPIC, queue_id, result.next_begin_offset)
    return result.next_begin_offset


def scrape(port: int, name: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return int(float(match.group(1)))


async def test_the_page_shows_a_group_lag_falling_to_zero_as_it_consumes(
    tmp_path: pathlib.Path,
) -> None:
    chromium_path()  # fails, naming the install script, when the browser is missing
    daemon = Daemon(tmp_path / "store", "--metrics-listen", "127.0.0.1:0")
    try:
        http_port = int(str(daemon.event("metrics_listening")["port"]))
        with trio.fail_after(60):
            async with open_producer("127.0.0.1", daemon.port) as producer:
                for queue_id in range(USED):
                    for n in range(PER_QUEUE):
                        body = f"order-{queue_id}-{n}".encode()
                        await producer.send(Message(TOPIC, body, queue_id=queue_id))
            async with (
                open_pull_consumer("127.0.0.1", daemon.port, GROUP) as consumer,
                open_browser(tmp_path / "profile") as browser,
            ):
                await consumer.subscribe(TOPIC)
                page = await browser.open_page(f"http://127.0.0.1:{http_port}/")
                await _read_the_page(page, consumer, daemon.port, http_port, tmp_path)
    finally:
        daemon.stop()


async def _read_the_page(
    page: Page, consumer: PullConsumer, broker_port: int, http_port: int, tmp_path: pathlib.Path
) -> None:
    total = USED * PER_QUEUE
    table = await until(page, group_rows, lambda t: lag_shown(t) == total, f"lag {total}")
    row = group_row(table)
    assert row is not None
    assert row[1:5] == [TOPIC, "1", f"{total}", "0"]  # topics, clients, broker, consumer

    topics = await until(page, lambda p: rows(p, "topics-table"), bool, "the topics")
    mine = [row for row in topics if row[0] == TOPIC]
    assert len(mine) == 1
    assert mine[0][1:5] == [f"{QUEUES}/{QUEUES}", "RW", f"{total}", f"{total}"]
    queues = mine[0][6]
    assert queues == ", ".join(
        [*(f"{queue_id}: 0–{PER_QUEUE}" for queue_id in range(USED)), f"({QUEUES - USED} empty)"]
    )
    assert not any(row[0].startswith("%RETRY%") for row in topics)  # system topics hidden

    # Consume one queue: the lag a person reads falls by its messages, then the rest.
    await consume_queue(consumer, 0)
    await until(page, group_rows, lambda t: lag_shown(t) == total - PER_QUEUE, "a falling lag")
    row_js = f"document.querySelector('#groups-table tr[data-group=\"{GROUP}\"]')"
    await page.evaluate(f"{row_js}.click()")  # a person clicks the group for its queues
    await until(
        page,
        lambda p: p.evaluate("document.getElementById('chart-group').innerText"),
        lambda shown: shown == GROUP,
        "the group's queues",
    )
    detail = await rows(page, "queues-table")
    assert [r[:5] for r in detail[:2]] == [
        [TOPIC, "0", f"{PER_QUEUE}", f"{PER_QUEUE}", "0"],
        [TOPIC, "1", f"{PER_QUEUE}", "0", f"{PER_QUEUE}"],
    ]
    assert detail[0][5] != "–" and detail[1][5] == "–"  # a last-consumed time only where read
    for queue_id in range(1, USED):
        await consume_queue(consumer, queue_id)
    await until(page, group_rows, lambda t: lag_shown(t) == 0, "lag 0")

    # New traffic: the page shows a send rate while it arrives, and the lag it makes.
    async with open_producer("127.0.0.1", broker_port) as producer:
        for n in range(LATE):
            await producer.send(Message(TOPIC, f"late-{n}".encode(), queue_id=USED))
    # (the rate is the broker's over its last seconds: the earlier traffic may still show)
    await until(
        page,
        group_rows,
        lambda t: sent_shown(t) > 0 and lag_shown(t) == LATE,
        "a send rate and the lag it makes",
    )

    # The store section shows the commit log as /metrics counts it.
    written = scrape(http_port, "rmq_broker_store_written_offset_bytes")
    store = await until(
        page, lambda p: facts(p, "store-facts"), lambda f: f.get("Written offset"), "the store"
    )
    assert store["Written offset"] == f"{written:,}"
    assert store["Segments"].startswith("1 of ")
    assert store["Writeable"] == "yes" and store["Flags"] == "none"
    connections = await rows(page, "connections-table")
    assert any(GROUP in row[4] for row in connections)
    status = await page.evaluate("document.getElementById('status').className")
    assert status == ""  # no error banner

    shot = tmp_path / "dashboard.png"
    size = await page.screenshot(shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert size < 200 * 1024
    if target := os.environ.get("DASHBOARD_SCREENSHOT"):
        shutil.copyfile(shot, target)


def test_without_chromium_the_test_fails_naming_the_install_script(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(AssertionError, match=r"bash tests/install-chromium\.sh"):
        chromium_path()
