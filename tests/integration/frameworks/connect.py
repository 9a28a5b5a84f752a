"""Kafka Connect's distributed worker and MirrorMaker 2 as the tests start them, and a REST client.

Both are started as Kafka's scripts start them (bin/connect-distributed.sh and
bin/connect-mirror-maker.sh exec kafka-run-class.sh with the main class and a properties file);
only the heap is smaller and the log goes to a file.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from .jvm import JavaProcess, wait_until

CONNECT_MAIN = "org.apache.kafka.connect.cli.ConnectDistributed"
MIRROR_MAKER_MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"
START_TIMEOUT = 90.0  # a JVM start-up on a loaded 2-core machine


def write_properties(path: Path, settings: Mapping[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


class RestError(AssertionError):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status


class ConnectWorker:
    """One distributed worker: its properties file, its JVM (restartable) and its REST API."""

    def __init__(self, start_jvm: Callable[..., JavaProcess], classpath: list[Path],
                 workdir: Path, settings: Mapping[str, object], port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.config = write_properties(workdir / "connect-distributed.properties",
                                       {**settings, "listeners": self.url})
        self._start_jvm = start_jvm
        self._classpath = classpath
        self.jvm: JavaProcess | None = None

    def start(self) -> None:
        """Start the JVM (again), and wait until its herder has joined the group."""
        if self.jvm is None:
            self.jvm = self._start_jvm("connect", self._classpath, CONNECT_MAIN, [str(self.config)])
            since = 0
        else:
            since = len(self.jvm.log())
            self.jvm.start()
        self.jvm.wait_for_log(r"Finished starting connectors and tasks", START_TIMEOUT, since)
        wait_until(lambda: self._answers(), 30, "the REST API to answer")

    def stop(self) -> None:
        assert self.jvm is not None
        self.jvm.stop()

    def kill(self) -> None:
        assert self.jvm is not None
        self.jvm.kill()

    def _answers(self) -> bool:
        try:
            self.request("GET", "/connectors")
            return True
        except (OSError, RestError):
            return False

    def request(self, method: str, path: str, body: object = None, timeout: float = 30.0) -> object:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as e:
            raise RestError(e.code, e.read().decode(errors="replace")) from None
        return json.loads(text) if text else None

    def put_connector(self, name: str, config: Mapping[str, str], timeout: float = 60.0) -> None:
        """Create or update a connector; retries the 409s a rebalance in progress answers."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.request("PUT", f"/connectors/{name}/config", dict(config))
                return
            except RestError as e:
                if e.status != 409 or time.monotonic() > deadline:
                    raise
            time.sleep(0.5)

    def delete_connector(self, name: str) -> None:
        try:
            self.request("DELETE", f"/connectors/{name}")
        except RestError as e:
            if e.status != 404:
                raise

    def status(self, name: str) -> dict:
        try:
            found = self.request("GET", f"/connectors/{name}/status")
        except (OSError, RestError):
            return {}
        return found if isinstance(found, dict) else {}

    def wait_running(self, name: str, tasks: int = 1, timeout: float = 60.0) -> dict:
        """Poll until the connector and ``tasks`` tasks are RUNNING; fail at once on FAILED."""

        def running() -> dict | None:
            st = self.status(name)
            states = [st.get("connector", {}).get("state"),
                      *(t.get("state") for t in st.get("tasks", []))]
            if "FAILED" in states:
                raise AssertionError(f"connector {name} failed: {json.dumps(st, indent=1)}")
            if len(states) == tasks + 1 and all(s == "RUNNING" for s in states):
                return st
            return None

        return wait_until(running, timeout, f"connector {name} RUNNING",  # type: ignore[return-value]
                          lambda: json.dumps(self.status(name)))
