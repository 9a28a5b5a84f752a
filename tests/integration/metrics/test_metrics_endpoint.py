"""The Prometheus endpoint of a real broker, driven by real clients: the numbers it shows are
the ones the clients made (records, bytes, requests, consumer lag), it answers only /metrics,
and a scraper that never sends its request holds neither the endpoint nor the broker."""

from __future__ import annotations

import http.client
import re
import socket
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from ..clients import create_topic

pytestmark = pytest.mark.timeout(120)
MONITORING = Path(__file__).resolve().parents[3] / "docs" / "monitoring"


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def wait_for(url: str, check, timeout: float = 20.0) -> dict:
    """Scrape until ``check(samples)`` holds (counters are read as the broker goes on)."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(url)
        if check(samples):
            return samples
        if time.monotonic() > deadline:
            return samples  # the caller's asserts say what differs
        time.sleep(0.1)  # poll interval, not synchronisation


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for v in values:
        p.produce(topic, v, partition=partition)
    assert p.flush(20) == 0


@pytest.fixture
def broker(make_broker):
    return make_broker()


def test_counts_match_what_the_clients_did(broker) -> None:
    topic = f"m-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, partitions=2)
    values = [f"value-{i:04d}".encode() for i in range(300)]
    produce(broker.bootstrap, topic, values[:200], 0)
    produce(broker.bootstrap, topic, values[200:], 1)
    group = f"g-{uuid.uuid4().hex[:6]}"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = 0
        deadline = time.monotonic() + 30
        while got < 150 and time.monotonic() < deadline:
            for m in c.consume(150 - got, 1.0):
                assert m.error() is None
                got += 1
        assert got == 150
        c.commit(offsets=[TopicPartition(topic, 0, 150), TopicPartition(topic, 1, 40)],
                 asynchronous=False)
    finally:
        c.close()
    url = broker.metrics_url
    samples = wait_for(url, lambda s: value(s, "kafka_consumergroup_lag", consumergroup=group,
                                            topic=topic, partition="1") is not None)
    assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 300
    bytes_in = value(samples, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    assert bytes_in is not None and bytes_in > sum(map(len, values))  # batch overhead on top
    bytes_out = value(samples, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic)
    assert bytes_out is not None and bytes_out > 150 * len(values[0])
    assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total") >= 300  # all topics
    produce_requests = sum(v for (name, labels), v in samples.items()
                           if name == "kafka_network_requestmetrics_requests_total"
                           and ("request", "Produce") in labels)
    assert produce_requests >= 2
    assert value(samples, "kafka_network_requestmetrics_totaltimems_count",
                 request="Produce") == produce_requests
    # consumer lag from the committed offsets and the high watermarks
    assert value(samples, "kafka_consumergroup_lag", consumergroup=group, topic=topic,
                 partition="0") == 50
    assert value(samples, "kafka_consumergroup_lag", consumergroup=group, topic=topic,
                 partition="1") == 60
    assert value(samples, "kafka_consumergroup_lag_sum", consumergroup=group) == 110
    assert value(samples, "kafka_consumergroup_lag_max", consumergroup=group) == 60
    seconds = value(samples, "kafka_consumergroup_lag_seconds", consumergroup=group,
                    topic=topic, partition="0")
    assert seconds is not None and 0 <= seconds < 120
    # gauges of a single node: it leads everything and is the controller
    assert value(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    leaders = value(samples, "kafka_server_replicamanager_leadercount")
    assert leaders is not None and leaders >= 2
    size = value(samples, "kafka_log_log_size", topic=topic, partition="0")
    assert size is not None and size > 200 * len(values[0])
    assert value(samples, "kafka_log_log_logendoffset", topic=topic, partition="1") == 100
    # the dashboard and the alerts in docs/ use only names a broker serves
    served = {name for name, _ in samples}
    for doc in ("grafana-dashboard.json", "alerts.yml"):
        used = set(re.findall(r"\b((?:kafka|strom|process)_[a-z0-9_]+)", (MONITORING / doc).read_text()))
        assert used and used <= served, (doc, sorted(used - served))


def test_the_lag_shrinks_as_the_group_commits(broker) -> None:
    topic = f"m-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, partitions=1)
    produce(broker.bootstrap, topic, [b"x"] * 30, 0)
    group = f"g-{uuid.uuid4().hex[:6]}"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
        lag = ("kafka_consumergroup_lag", {"consumergroup": group, "topic": topic,
                                           "partition": "0"})
        samples = wait_for(broker.metrics_url, lambda s: value(s, lag[0], **lag[1]) == 20)
        assert value(samples, lag[0], **lag[1]) == 20
        c.commit(offsets=[TopicPartition(topic, 0, 30)], asynchronous=False)
        samples = wait_for(broker.metrics_url, lambda s: value(s, lag[0], **lag[1]) == 0)
        assert value(samples, lag[0], **lag[1]) == 0
        assert value(samples, "kafka_consumergroup_lag_seconds", consumergroup=group,
                     topic=topic, partition="0") == 0
    finally:
        c.close()


def _status(url: str, method: str = "GET") -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method),
                                    timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _status_or_busy(url: str) -> int:
    """The status, with a connection closed before its answer counted as busy: a 503 can be
    lost when the endpoint closes a socket whose request it did not read."""
    try:
        return _status(url)[0]
    except (ConnectionError, http.client.RemoteDisconnected):
        return 503


def test_only_metrics_are_served(broker) -> None:
    url = broker.metrics_url
    base = url.removesuffix("/metrics")
    assert urlsplit(url).hostname == "127.0.0.1"
    assert _status(url)[0] == 200
    assert _status(url, "HEAD") == (200, b"")
    for path in ("/", "/metrics/", "/../etc/passwd", "/favicon.ico", "/metrics?x=1/../"):
        code, body = _status(base + path)
        if path == "/metrics?x=1/../":  # a query string is still /metrics
            assert code == 200
            continue
        assert code == 404, path
        assert b"Traceback" not in body and len(body) < 200
    code, body = _status(url, "POST")
    assert code == 405 and b"Traceback" not in body
    assert _status(url, "DELETE")[0] == 405


def test_a_silent_scraper_stalls_neither_the_endpoint_nor_the_broker(broker) -> None:
    url = urlsplit(broker.metrics_url)
    silent = []
    try:
        for _ in range(20):  # more than the endpoint serves at once; none sends a byte
            s = socket.create_connection((url.hostname, url.port), timeout=5)
            silent.append(s)
        topic = f"m-{uuid.uuid4().hex[:6]}"
        create_topic(broker.bootstrap, topic, partitions=1)
        produce(broker.bootstrap, topic, [b"v"] * 10, 0)  # the broker goes on serving
    finally:
        for s in silent:
            s.close()
    # once they are gone, scrapes are answered again (after a 503 or two while the endpoint's
    # threads see the closes and free their slots)
    deadline = time.monotonic() + 20
    while (code := _status_or_busy(broker.metrics_url)) == 503 and time.monotonic() < deadline:
        time.sleep(0.1)  # poll interval
    assert code == 200
    samples = wait_for(broker.metrics_url, lambda s: value(
        s, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 10)
    assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 10


def test_a_long_poll_fetch_is_in_the_fetch_purgatory_while_it_waits(broker) -> None:
    """A consumer at the end of an empty partition waits in the broker (fetch.min.bytes 1):
    the purgatory gauge, read from the connections when scraped, shows it, then not once the
    consumer has gone."""
    topic = f"m-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, partitions=1)
    purgatory = "kafka_server_delayedoperationpurgatory_purgatorysize"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "fetch.wait.max.ms": 5000, "fetch.min.bytes": 1})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        c.consume(1, 0.5)  # fetching starts in the client's background
        samples = wait_for(broker.metrics_url,
                           lambda s: (value(s, purgatory, delayedoperation="Fetch") or 0) >= 1)
        assert value(samples, purgatory, delayedoperation="Fetch") == 1
        assert value(samples, purgatory, delayedoperation="Produce") == 0
    finally:
        c.close()
    samples = wait_for(broker.metrics_url,
                       lambda s: value(s, purgatory, delayedoperation="Fetch") == 0)
    assert value(samples, purgatory, delayedoperation="Fetch") == 0


def test_metrics_off_serves_nothing_and_the_broker_says_so(make_broker) -> None:
    broker = make_broker({"metrics.listener": ""})
    topic = f"m-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, partitions=1)  # the broker serves (and printed its line)
    with pytest.raises(RuntimeError, match="no metrics endpoint"):
        broker.wait_metrics_url(timeout=1.0)
    produce(broker.bootstrap, topic, [b"v"] * 3, 0)


def test_lag_of_a_kip848_group_member(broker) -> None:
    """A consumer of the KIP-848 protocol (group.protocol=consumer): its committed offsets give
    the same lag as a classic group's."""
    topic = f"m-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, partitions=1)
    produce(broker.bootstrap, topic, [b"z"] * 40, 0)
    group = f"g-{uuid.uuid4().hex[:6]}"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "group.protocol": "consumer", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 30
        while got < 25 and time.monotonic() < deadline:
            for m in c.consume(25 - got, 1.0):
                assert m.error() is None
                got += 1
        assert got == 25
        c.commit(offsets=[TopicPartition(topic, 0, 25)], asynchronous=False)
        lag = {"consumergroup": group, "topic": topic, "partition": "0"}
        samples = wait_for(broker.metrics_url,
                           lambda s: value(s, "kafka_consumergroup_lag", **lag) == 15)
        assert value(samples, "kafka_consumergroup_lag", **lag) == 15
        assert value(samples, "kafka_consumergroup_lag_sum", consumergroup=group) == 15
    finally:
        c.close()
