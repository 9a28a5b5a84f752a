"""One broker per xdist worker serving the HTTP API and the schema registry, shared by this
package's test files, and a small HTTP client for Confluent's JSON bodies."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from ..broker import BrokerProcess

REST_OVERRIDES = {"rest.listeners": "http://127.0.0.1:0",
                  "schema.registry.listeners": "http://127.0.0.1:0",
                  "metrics.listener": "", "num.partitions": "1"}


def started_url(broker: BrokerProcess, what: str, timeout: float = 10.0) -> str:
    return broker.started_url(what, timeout)


@dataclass
class Rest:
    """Requests to the HTTP API: (status, decoded JSON body or None)."""

    url: str
    broker: BrokerProcess
    registry_url: str
    auth: tuple[str, str] | None = None
    _cluster_id: str | None = None

    def call(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
             headers: dict[str, str] | None = None, timeout: float = 30.0
             ) -> tuple[int, Any]:
        data = raw if raw is not None else (
            json.dumps(body).encode() if body is not None else None)
        sent = {"Content-Type": "application/json", **(headers or {})}
        if self.auth is not None:
            import base64

            token = base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
            sent["Authorization"] = f"Basic {token}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=sent)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                text = resp.read()
                return resp.status, json.loads(text) if text.strip() else None
        except urllib.error.HTTPError as e:
            text = e.read()
            try:
                return e.code, json.loads(text) if text.strip() else None
            except ValueError:
                return e.code, text.decode(errors="replace")

    def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return self.call("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return self.call("POST", path, body, **kw)

    def put(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return self.call("PUT", path, body, **kw)

    def delete(self, path: str, **kw: Any) -> tuple[int, Any]:
        return self.call("DELETE", path, **kw)

    @property
    def cluster_id(self) -> str:
        if self._cluster_id is None:
            status, body = self.get("/v3/clusters")
            assert status == 200, body
            self._cluster_id = body["data"][0]["cluster_id"]
        return self._cluster_id

    @property
    def v3(self) -> str:
        """The cluster's v3 path prefix."""
        return f"/v3/clusters/{self.cluster_id}"


def wait_answers(rest: Rest, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            status, _ = rest.get("/v3/clusters", timeout=5)
            if status == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("the HTTP API did not answer")
        time.sleep(0.05)  # poll interval, not synchronisation


@pytest.fixture(scope="package")
def shared_rest_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the files of this package an xdist worker runs (a file that needs other
    settings, or that damages its broker, overrides `rest_broker` with a broker of its own)."""
    from ..conftest import _Launcher

    launcher = _Launcher(tmp_path_factory, "rest-shared")
    try:
        yield launcher(REST_OVERRIDES)
    finally:
        launcher.stop_all()


@pytest.fixture(scope="module")
def rest_broker(shared_rest_broker: BrokerProcess) -> BrokerProcess:
    return shared_rest_broker


@pytest.fixture(scope="module")
def rest(rest_broker: BrokerProcess) -> Iterator[Rest]:
    client = Rest(started_url(rest_broker, "HTTP API"), rest_broker,
                  started_url(rest_broker, "schema registry"))
    wait_answers(client)
    yield client
