"""The Prometheus endpoint: a small threaded WSGI server (the standard library's) in its own
threads, so a scrape never runs on the broker's event loop and a slow scraper holds only its
own thread.

It answers ``GET``/``HEAD /metrics`` and nothing else: other paths get 404, other methods
405, both as one line of text (no listing, no traceback). Connections are bounded: at most
``MAX_SCRAPES`` at once (more get a ``503`` with ``Retry-After`` and are closed at once) and
each must send its request within ``SOCKET_TIMEOUT_S``.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

log = logging.getLogger(__name__)

MAX_SCRAPES = 8
SOCKET_TIMEOUT_S = 10.0

StartResponse = Callable[..., Any]

_BUSY_TEXT = b"too many scrapes at once: retry shortly\n"
BUSY_RESPONSE = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
                 b"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(_BUSY_TEXT), _BUSY_TEXT))


def metrics_app(registry: CollectorRegistry) -> Callable[[dict[str, Any], StartResponse],
                                                         Iterable[bytes]]:
    """The WSGI app: the registry's samples at /metrics, in the format the scraper accepts."""

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "")
        if environ.get("PATH_INFO") != "/metrics":
            return _text(start_response, "404 Not Found", "not found: the metrics are at /metrics")
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Content-Type", "text/plain"),
                                                      ("Allow", "GET, HEAD")])
            return [b"method not allowed\n"]
        try:
            encoder, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
            body = encoder(registry)
        except Exception:
            log.exception("collecting metrics failed")
            return _text(start_response, "500 Internal Server Error", "collecting metrics failed")
        start_response("200 OK", [("Content-Type", content_type),
                                  ("Content-Length", str(len(body)))])
        return [b""] if method == "HEAD" else [body]

    return app


def _text(start_response: StartResponse, status: str, text: str) -> list[bytes]:
    body = (text + "\n").encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(body)))])
    return [body]


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr; a request line must arrive within the timeout."""

    timeout = SOCKET_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _BoundedServer(ThreadingMixIn, WSGIServer):
    """One thread per scrape, at most MAX_SCRAPES at once: a flood of slow connections costs
    a few threads, never the broker."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(MAX_SCRAPES)
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            _answer_busy(request)  # too many at once: told so and closed, never waited on
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("metrics connection from %s failed", client_address, exc_info=True)


def _answer_busy(request: socket.socket) -> None:
    """A 503 in one non-blocking send (it fits any socket buffer): a scraper over the bound
    learns why, and the accept loop never waits on it."""
    try:
        request.setblocking(False)
        request.send(BUSY_RESPONSE)
        request.recv(65536)  # what the scraper already sent: read, so the close is no reset
    except OSError:
        pass  # the scraper is gone or its window is full: closing says enough


class _BoundedServer6(_BoundedServer):
    address_family = socket.AF_INET6


class MetricsServer:
    """Serves a registry on host:port from a daemon thread until `stop`."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self.registry = registry  # collectors added later are served too
        self._server = make_server(host, port, metrics_app(registry), server_class=_BoundedServer6 if ":" in host else _BoundedServer,
                                   handler_class=_QuietHandler)
        self.host = host
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-http",
                                        kwargs={"poll_interval": 0.5}, daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def start(self) -> None:
        self._thread.start()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            socket.create_connection((self.host, self.port), timeout=0.5).close()

    def stop(self) -> None:
        """Stop serving. `serve_forever` checks for shutdown only between polls (half a second
        apart), so a connection is made to wake it at once: a broker stops half a second sooner."""
        stopper = threading.Thread(target=self._server.shutdown, name="metrics-http-stop",
                                   daemon=True)
        stopper.start()
        while stopper.is_alive():
            self._wake()
            stopper.join(0.05)
        self._server.server_close()
        self._thread.join(timeout=5)
