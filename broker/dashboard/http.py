"""The broker's HTTP port: /metrics for Prometheus, the dashboard page and its JSON documents.

One WSGI application served from a thread (prometheus_client's threading WSGI server), as the
/metrics endpoint always was. Why not Trio: a scrape reads counters and store properties
without touching the event loop, so /metrics still answers while the loop is saturated or
stuck, which is when it is needed; and the thread needs no HTTP parser of our own. The JSON
documents, though, read tables the loop changes between awaits: `LoopBridge` runs each view
function on the loop thread (`TrioToken.run_sync_soon`) and the HTTP thread waits at most
`VIEW_TIMEOUT_S` for it, answering 503 when the loop does not get to it in time (a view is
a few dict walks; a loop that late is in trouble, and the page says so).

Routes, GET only (405 with `Allow: GET` for any other method, 404 for any other path):
`/metrics`, `/` (the page), `/static/<file>` (its script and style), `/api/<doc>.json`
(`group.json?group=NAME`: 400 without a name, 404 for an unknown group).
The page is read-only: no route changes anything. The dashboard is attached once the broker is
built (`HttpEndpoint.attach`); before that, and after the broker stops, the JSON routes answer
503.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl
from wsgiref.simple_server import WSGIRequestHandler, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

import orjson
import structlog
import trio
from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from broker.dashboard import views
from broker.metrics import BrokerMetrics, MetricsServer

if TYPE_CHECKING:
    from broker.context import BrokerContext

log = structlog.get_logger()

#: how long an HTTP thread waits for the event loop to compute a document
VIEW_TIMEOUT_S: Final = 2.0
STATIC_DIR: Final = Path(__file__).parent / "static"
#: the static files served, name -> content type (nothing else under static/ is reachable)
STATIC_FILES: Final = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
#: the page loads only its own files and talks only to its own origin
SECURITY_HEADERS: Final = [
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
]

#: a document from the server and the query string's parameters (the last value of each)
View = Callable[["views.Served", Mapping[str, str]], views.Json]


class LoopUnavailableError(Exception):
    """The event loop did not compute the document (not attached, stopped or too late)."""


class DocumentError(Exception):
    """A request for a document that cannot be answered: `status` and a one-line reason."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def _broker(server: views.Served) -> BrokerContext:
    return server.broker


def _group(server: views.Served, query: Mapping[str, str]) -> views.Json:
    name = query.get("group")
    if not name:
        raise DocumentError("400 Bad Request", "name the group: /api/group.json?group=NAME")
    document = views.group_detail(server.broker, name)
    if document is None:
        raise DocumentError("404 Not Found", "no such consumer group")
    return document


#: JSON document name -> the view computing it
DOCUMENTS: Final[dict[str, View]] = {
    "broker": lambda server, _query: views.broker_status(server),
    "topics": lambda server, _query: views.topic_list(_broker(server)),
    "groups": lambda server, _query: views.group_list(_broker(server)),
    "group": _group,
    "connections": lambda server, _query: views.connection_list(server),
    "store": lambda server, _query: views.store_status(_broker(server)),
}


@dataclass(slots=True)
class LoopBridge:
    """Runs view functions on the broker's event loop for the HTTP threads."""

    server: views.Served
    token: trio.lowlevel.TrioToken

    def compute(
        self, view: View, query: Mapping[str, str], timeout_s: float | None = None
    ) -> views.Json:
        """`view(server, query)` run on the loop thread; LoopUnavailableError if the loop is gone or
        has not run it within `timeout_s` (`VIEW_TIMEOUT_S`). A view's exception is raised."""
        timeout_s = VIEW_TIMEOUT_S if timeout_s is None else timeout_s
        done = threading.Event()
        outcome: list[views.Json | Exception] = []

        def job() -> None:
            # A callback that raises would crash the loop: every exception is handed over.
            try:
                outcome.append(view(self.server, query))
            except Exception as exc:
                outcome.append(exc)
            done.set()

        try:
            self.token.run_sync_soon(job)
        except trio.RunFinishedError:
            raise LoopUnavailableError("the broker has stopped") from None
        if not done.wait(timeout_s):
            raise LoopUnavailableError(f"the broker's event loop did not answer in {timeout_s} s")
        result = outcome[0]
        if isinstance(result, Exception):
            raise result
        return result


@dataclass(slots=True)
class HttpEndpoint:
    """The WSGI application of the broker's HTTP port."""

    metrics: BrokerMetrics
    bridge: LoopBridge | None = None
    #: the bound port, once serving
    port: int = 0
    _metrics_app: WSGIApplication = field(init=False)

    def __post_init__(self) -> None:
        self._metrics_app = make_wsgi_app(self.metrics.registry)

    def attach(self, server: views.Served, token: trio.lowlevel.TrioToken) -> None:
        """Serve the dashboard of `server`, whose loop is `token`'s, from now on."""
        self.bridge = LoopBridge(server, token)

    def detach(self) -> None:
        self.bridge = None

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO") or "/")
        if environ.get("REQUEST_METHOD") != "GET":
            return _plain(
                start_response, "405 Method Not Allowed", "GET only\n", [("Allow", "GET")]
            )
        if path == "/metrics":
            return self._metrics_app(environ, start_response)
        if path in ("/", "/index.html"):
            return _static(start_response, "index.html")
        if path.startswith("/static/") and path[len("/static/") :] in STATIC_FILES:
            return _static(start_response, path[len("/static/") :])
        if path.startswith("/api/") and path.endswith(".json"):
            name = path[len("/api/") : -len(".json")]
            if name in DOCUMENTS:
                query = dict(parse_qsl(str(environ.get("QUERY_STRING") or "")))
                return self._document(start_response, name, query)
        return _plain(start_response, "404 Not Found", "not found\n")

    def _document(
        self, start_response: StartResponse, name: str, query: Mapping[str, str]
    ) -> Iterable[bytes]:
        bridge = self.bridge
        try:
            if bridge is None:
                raise LoopUnavailableError("the broker is not serving yet")
            document = bridge.compute(DOCUMENTS[name], query)
        except LoopUnavailableError as exc:
            return _json(start_response, "503 Service Unavailable", {"error": str(exc)})
        except DocumentError as exc:
            return _json(start_response, exc.status, {"error": str(exc)})
        except Exception as exc:
            log.exception("dashboard_view_failed", document=name)
            body = {"error": f"the document could not be computed: {type(exc).__name__}"}
            return _json(start_response, "500 Internal Server Error", body)
        return _json(start_response, "200 OK", document)


def _respond(
    start_response: StartResponse,
    status: str,
    content_type: str,
    body: bytes,
    extra: list[tuple[str, str]] | None = None,
) -> list[bytes]:
    headers = [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        ("Cache-Control", "no-store"),
        *SECURITY_HEADERS,
        *(extra or []),
    ]
    start_response(status, headers)
    return [body]


def _plain(
    start_response: StartResponse,
    status: str,
    text: str,
    extra: list[tuple[str, str]] | None = None,
) -> list[bytes]:
    return _respond(start_response, status, "text/plain; charset=utf-8", text.encode(), extra)


def _json(start_response: StartResponse, status: str, document: dict[str, Any]) -> list[bytes]:
    return _respond(start_response, status, "application/json", orjson.dumps(document))


def _static(start_response: StartResponse, name: str) -> list[bytes]:
    body = (STATIC_DIR / name).read_bytes()
    return _respond(start_response, "200 OK", STATIC_FILES[name], body)


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr: the broker logs through structlog, and scrapes are frequent."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve_http(host: str, port: int, endpoint: HttpEndpoint) -> MetricsServer:
    """Serve `endpoint` on http://host:port/ from a daemon thread, one thread per request.

    Raises OSError when the address cannot be bound.
    """

    class Server(ThreadingWSGIServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    httpd = make_server(host, port, endpoint, Server, handler_class=_QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, name="http", daemon=True)
    thread.start()
    return MetricsServer(host=host, port=httpd.server_port, _server=httpd, _serving_thread=thread)
