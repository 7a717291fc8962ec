"""The dashboard's HTTP side against an in-process broker with traffic: routes, methods, the
JSON documents' numbers, their bounds, the loop bridge's timeout, and no secret in any page.

The requests go over real sockets from worker threads, as a browser's would: the documents are
computed on the broker's event loop, which must be free to run them while the test waits.
"""

from __future__ import annotations

import json
import pathlib
import threading

import pytest
import trio

from broker.dashboard import http, views
from broker.metrics import BrokerMetrics
from rmq_client.producer import Message, open_producer
from rmq_client.pull_consumer import open_pull_consumer
from tests.broker.dashboard_helpers import document, fetch, get, http_port, start

ACL = """
accounts:
  - accessKey: dashboard-user
    secretKey: "s3cret-never-shown"
    admin: true
"""


async def test_documents_count_what_was_sent_and_committed(
    nursery: trio.Nursery, tmp_path: pathlib.Path
) -> None:
    broker = await start(nursery, tmp_path)
    port = http_port(broker)
    async with open_producer("127.0.0.1", broker.port) as producer:
        for n in range(7):
            await producer.send(Message("Shipments", f"s{n}".encode(), queue_id=n % 2))
    async with open_pull_consumer("127.0.0.1", broker.port, "billing") as consumer:
        await consumer.subscribe("Shipments")
        groups = await document(port, "groups")
        billing = next(g for g in groups["groups"] if g["group"] == "billing")
        assert (billing["lag"], billing["clients"], billing["topics"]) == (7, 1, ["Shipments"])
        assert billing["queues"] == [] and billing["queues_omitted"] == 4  # totals only
        await consumer.commit("Shipments", 0, 3)
        billing = await document(port, "group", "?group=billing")
        assert [(q["queue_id"], q["broker_offset"], q["consumer_offset"], q["lag"]) for q in
                billing["queues"][:2]] == [(0, 4, 3, 1), (1, 3, 0, 3)]  # fmt: skip
        assert billing["lag"] == 4 and billing["queues"][0]["last"] > 0
        assert billing["queues"][1]["last"] == 0
        connections = await document(port, "connections")
        assert any("billing (python-pull@0)" in c["consumer_groups"]
                   for c in connections["connections"])  # fmt: skip
    topics = await document(port, "topics")
    shipments = next(t for t in topics["topics"] if t["topic"] == "Shipments")
    assert [(q["min_offset"], q["max_offset"]) for q in shipments["queues"][:2]] == [(0, 4), (0, 3)]
    assert (shipments["messages"], shipments["system"], topics["omitted"]) == (7, False, 0)
    assert all(t["system"] for t in topics["topics"] if t["topic"] != "Shipments")
    store = await document(port, "store")
    assert store["written_offset"] >= store["flushed_offset"] >= 0
    assert store["written_offset"] > 7 * 100  # seven records of a header and a body each
    assert (store["segments"], store["writeable"], store["flags"]) == (1, True, [])
    about = await document(port, "broker")
    assert (about["broker_name"], about["cluster"], about["broker_addr"]) == (
        "broker-a",
        "DefaultCluster",
        f"127.0.0.1:{broker.port}",
    )
    await broker.stop()


async def test_routes_methods_and_the_page(nursery: trio.Nursery, tmp_path: pathlib.Path) -> None:
    broker = await start(nursery, tmp_path)
    port = http_port(broker)
    status, headers, page = await get(port, "/")
    assert status == 200 and b'<script src="/static/app.js"' in page
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    for name in ("app.js", "style.css"):
        assert (await get(port, f"/static/{name}"))[0] == 200
    status, _, metrics = await get(port, "/metrics")
    assert status == 200 and b"rmq_broker_store_written_offset_bytes" in metrics
    for path in ("/nope", "/api/nope.json", "/static/../views.py", "/static/", "/api/store"):
        assert (await get(port, path))[0] == 404, path
    status, _, body = await get(port, "/api/group.json?group=nobody")
    assert (status, json.loads(body)) == (404, {"error": "no such consumer group"})
    status, _, body = await get(port, "/api/group.json")
    assert status == 400 and "group=NAME" in json.loads(body)["error"]
    for method in ("POST", "PUT", "DELETE"):
        status, headers, _ = await get(port, "/api/store.json", method)
        assert (status, headers["Allow"]) == (405, "GET")
    assert (await get(port, "/metrics", "POST"))[0] == 405
    await broker.stop()


async def test_lists_are_capped_and_say_how_much_they_left_out(
    nursery: trio.Nursery, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = await start(nursery, tmp_path)
    async with open_producer("127.0.0.1", broker.port) as producer:
        for topic in ("Alpha", "Beta", "Gamma"):
            await producer.send(Message(topic, b"x", queue_id=3))  # a queue left unlisted
    monkeypatch.setattr(views, "MAX_TOPICS", 2)
    monkeypatch.setattr(views, "MAX_QUEUES", 3)
    topics = await document(http_port(broker), "topics")
    assert [t["topic"] for t in topics["topics"]] == ["Alpha", "Beta"]
    total = len(broker.server.broker.topics.topics())
    assert (topics["omitted"], topics["limit"]) == (total - 2, 2)
    assert [(len(t["queues"]), t["queues_omitted"]) for t in topics["topics"]] == [(3, 1)] * 2
    assert [t["messages"] for t in topics["topics"]] == [1, 1]  # totals count every queue
    full = views.topic_stats(broker.server.broker, "Alpha")  # as an admin request wants it
    assert full is not None and (len(full["queues"]), full["queues_omitted"]) == (4, 0)
    await broker.stop()


async def test_a_busy_loop_gets_503_and_a_failing_view_500_never_the_loop(
    nursery: trio.Nursery, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = await start(nursery, tmp_path)
    port = http_port(broker)
    monkeypatch.setattr(http, "VIEW_TIMEOUT_S", 0.3)
    answers: list[tuple[int, dict[str, str], bytes]] = []
    worker = threading.Thread(target=lambda: answers.append(fetch(port, "/api/store.json")))
    worker.start()
    # The event loop is stuck here until the answer has come: the view cannot run. A bridge
    # that waited for the loop without a bound would never answer (the join gives up).
    worker.join(10)
    assert answers, "no answer while the event loop was stuck"
    status, _, body = answers[0]
    assert status == 503 and "did not answer in 0.3 s" in json.loads(body)["error"]

    def broken(_server: object, _query: object) -> views.Json:
        raise KeyError("boom")

    monkeypatch.setitem(http.DOCUMENTS, "store", broken)
    status, _, body = await get(port, "/api/store.json")
    assert (status, json.loads(body)) == (
        500,
        {"error": "the document could not be computed: KeyError"},
    )
    assert (await document(port, "broker"))["broker_name"] == "broker-a"  # the loop runs on
    await broker.stop()
    endpoint = http.HttpEndpoint(BrokerMetrics())
    assert endpoint.bridge is None  # not attached: the documents answer 503, checked below
    server = http.serve_http("127.0.0.1", 0, endpoint)
    try:
        status, _, body = await get(server.port, "/api/broker.json")
        assert status == 503 and json.loads(body)["error"] == "the broker is not serving yet"
    finally:
        server.close()


async def test_no_page_shows_an_acl_secret(nursery: trio.Nursery, tmp_path: pathlib.Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL)
    broker = await start(nursery, tmp_path, acl_enable=True, acl_file=str(acl_file))
    port = http_port(broker)
    pages = [await get(port, path) for path in ("/", "/static/app.js", "/metrics")]
    pages += [await get(port, f"/api/{name}.json") for name in http.DOCUMENTS if name != "group"]
    assert all(status == 200 for status, _, _ in pages)
    pages.append(await get(port, "/api/group.json?group=dashboard-user"))
    assert (await document(port, "broker"))["acl_enable"] is True
    for _, _, body in pages:
        assert b"s3cret-never-shown" not in body and b"dashboard-user" not in body
    await broker.stop()
