"""Two brokers on one host with default settings: the metrics endpoint's default port (9404) is
Strom's own, so the second must not die for it; it serves Kafka without metrics and says so. A
metrics port the operator chose must be had."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..broker import HOST, STROM_BIN, BrokerProcess, free_port
from ..clients import create_topic

pytestmark = pytest.mark.timeout(120)

DEFAULT_URL = "http://127.0.0.1:9404/metrics"
BUSY_WARNING = ("logger=strom.config.ports msg=metrics not served: port 9404 on 127.0.0.1 (the "
                "default of metrics.listener) is in use")


@pytest.fixture(autouse=True)
def _strom_only(peer: str | None) -> None:
    if peer:
        pytest.skip("checks Strom's own metrics endpoint")


class DefaultMetricsBroker(BrokerProcess):
    """A broker that leaves metrics.listener at its default (the harness sets port 0)."""

    def command(self) -> list[str]:
        cmd = super().command()
        at = cmd.index(f"metrics.listener=http://{HOST}:0")
        return cmd[:at - 1] + cmd[at + 1:]


@pytest.fixture
def default_brokers(tmp_path: Path) -> Iterator[list[DefaultMetricsBroker]]:
    brokers = [DefaultMetricsBroker(tmp_path / name, name=name) for name in ("first", "second")]
    try:
        yield brokers
    finally:
        for broker in brokers:
            broker.stop()


def _logged(broker: BrokerProcess, *texts: str, timeout: float = 10.0) -> str:
    """The first of ``texts`` the broker's log shows (polled until ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        log = broker.log_text()
        for text in texts:
            if text in log:
                return text
        assert time.monotonic() < deadline, f"none of {texts} in {broker.log_path}"
        time.sleep(0.05)  # poll interval, not synchronisation


def test_a_second_broker_with_default_metrics_settings_serves_kafka(default_brokers) -> None:
    first, second = default_brokers
    first.start()
    # 9404 is the first broker's, unless something else on this host held it already
    served = f"metrics at {DEFAULT_URL}"
    first_has_it = _logged(first, served, BUSY_WARNING) == served
    second.start()
    # something else on the host (another test's broker) may have let 9404 go meanwhile; while
    # the first broker holds it, the second must find it taken
    second_said = _logged(second, BUSY_WARNING, served, timeout=30.0)
    if first_has_it:
        assert second_said == BUSY_WARNING, "the second broker took 9404 from the first"
    if second_said == BUSY_WARNING:
        with pytest.raises(RuntimeError, match="no metrics endpoint"):
            second.wait_metrics_url(timeout=1.0)
    topic = f"dp-{uuid.uuid4().hex[:6]}"
    create_topic(second.bootstrap, topic, partitions=1)  # the second serves Kafka
    if first_has_it:
        with urllib.request.urlopen(DEFAULT_URL, timeout=10) as answer:
            assert b"strom_build_info" in answer.read()  # and 9404 is still the first's


def test_a_busy_metrics_port_the_operator_chose_refuses_to_start(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind((HOST, 0))
        holder.listen()
        busy = holder.getsockname()[1]
        # subprocess.run kills the broker if it outlives the timeout
        result = subprocess.run(
            [str(STROM_BIN), "broker", "--override", f"listeners=PLAINTEXT://{HOST}:{free_port()}",
             "--override", f"log.dirs={tmp_path / 'data'}",
             "--override", f"metrics.listener=http://{HOST}:{busy}"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert result.returncode != 0
    assert result.stderr.splitlines()[-1] == (
        f"strom broker: cannot serve metrics on {HOST}:{busy} (metrics.listener): address "
        "already in use; give it another port, or an empty value to turn metrics off")
