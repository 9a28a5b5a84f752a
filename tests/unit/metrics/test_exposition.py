"""The endpoint's WSGI app and server, on a real socket on 127.0.0.1."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily

from strom.metrics.exposition import MAX_SCRAPES, MetricsServer


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


def test_connections_beyond_the_bound_are_closed_and_the_rest_still_served(
        server: MetricsServer) -> None:
    silent = [socket.create_connection(("127.0.0.1", server.port), timeout=5)
              for _ in range(MAX_SCRAPES)]
    try:
        extra = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        extra.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        assert extra.recv(100) == b"", "over the bound: closed at once, unanswered"
        extra.close()
    finally:
        for s in silent:
            s.close()
    code, _, _ = get(server.url)
    assert code == 200
