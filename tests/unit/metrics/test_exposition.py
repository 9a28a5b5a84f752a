"""The endpoint's WSGI app and server, on a real socket on 127.0.0.1."""

from __future__ import annotations

import http.client
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily

from strom.metrics.exposition import BUSY_RESPONSE, MAX_SCRAPES, MetricsServer


class Failing:
    def collect(self) -> Iterator[GaugeMetricFamily]:
        raise RuntimeError("secret internals")


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    registry = CollectorRegistry()
    Counter("demo_events", "events", registry=registry).inc(3)
    srv = MetricsServer(registry, "127.0.0.1", 0)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def get(url: str, method: str = "GET") -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=5) as r:
            return r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers.get("Content-Type", "")


def get_or_busy(url: str) -> int:
    """The status, with a connection closed before its answer counted as busy (a 503 may be
    lost when the server closes a socket whose request it never read)."""
    try:
        return get(url)[0]
    except (ConnectionError, http.client.RemoteDisconnected):
        return 503


def test_metrics_are_served_at_metrics(server: MetricsServer) -> None:
    code, body, kind = get(server.url)
    assert code == 200 and kind.startswith("text/plain")
    assert b"demo_events_total 3.0" in body
    assert server.url == f"http://127.0.0.1:{server.port}/metrics"


def test_other_paths_and_methods_get_one_line(server: MetricsServer) -> None:
    base = server.url.removesuffix("/metrics")
    assert get(base + "/")[:2] == (404, b"not found: the metrics are at /metrics\n")
    assert get(base + "/static/")[0] == 404
    code, body, _ = get(server.url, "POST")
    assert (code, body) == (405, b"method not allowed\n")
    assert get(server.url, "HEAD")[:2] == (200, b"")


def test_a_failing_collector_is_a_500_without_a_traceback() -> None:
    registry = CollectorRegistry()
    registry.register(Failing())
    srv = MetricsServer(registry, "127.0.0.1", 0)
    srv.start()
    try:
        code, body, _ = get(srv.url)
    finally:
        srv.stop()
    assert code == 500
    assert b"secret" not in body and b"Traceback" not in body


def test_connections_beyond_the_bound_get_a_503_and_the_rest_still_served(
        server: MetricsServer) -> None:
    silent = [socket.create_connection(("127.0.0.1", server.port), timeout=5)
              for _ in range(MAX_SCRAPES)]
    try:
        extra = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        answer = b""
        while chunk := extra.recv(1000):  # over the bound: answered at once, then closed
            answer += chunk
        extra.close()
        assert answer == BUSY_RESPONSE
        assert answer.startswith(b"HTTP/1.0 503 ") and b"Retry-After: 1" in answer
    finally:
        for s in silent:
            s.close()
    # the silent ones' threads see their close and free their slots: served again
    deadline = time.monotonic() + 10
    while (code := get_or_busy(server.url)) == 503 and time.monotonic() < deadline:
        time.sleep(0.05)  # poll interval
    assert code == 200
