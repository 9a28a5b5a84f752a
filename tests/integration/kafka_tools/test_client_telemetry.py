"""Client telemetry (KIP-714): Kafka 4.4 advertises GetTelemetrySubscriptions (71) and
PushTelemetry (72) only when a metrics reporter receiving client metrics is configured. Strom
exports no client metrics, so it advertises neither, and Kafka's Java clients, which push
metrics by default (``enable.metrics.push=true``), then never send them: the broker's request
counters and its log show none, while the clients' own requests are counted."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from strom.protocol.api_keys import ApiKey

from .. import clients as kc
from ..wire import Conn
from .tools import unique

pytestmark = pytest.mark.timeout(180)

GET_TELEMETRY_SUBSCRIPTIONS = ApiKey.GET_TELEMETRY_SUBSCRIPTIONS  # 71
PUSH_TELEMETRY = ApiKey.PUSH_TELEMETRY  # 72
TELEMETRY = {"GetTelemetrySubscriptions", "PushTelemetry"}  # Kafka's request labels


def _requests_counted(metrics_url: str) -> set[str]:
    """The request labels of the broker's per-API request counter."""
    with urllib.request.urlopen(metrics_url, timeout=10) as answer:
        text = answer.read().decode()
    return {s.labels["request"] for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "kafka_network_requestmetrics_requests_total" and s.value > 0}


def test_java_clients_send_no_telemetry_requests(kafka_tools, make_broker):
    broker = make_broker()  # its own: the counters and the log hold this test's clients only
    bs = broker.bootstrap
    with Conn(bs) as conn:
        error, keys = conn.api_versions_v0()
    assert error == 0 and ApiKey.PRODUCE in keys
    assert keys.keys() & {GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY} == set()
    topic = unique("telemetry")
    kc.create_topic(bs, topic, 1)
    out = kafka_tools.run("kafka-producer-perf-test", "--topic", topic, "--num-records", "200",
                          "--record-size", "100", "--throughput", "-1", "--command-property",
                          f"bootstrap.servers={bs}", "enable.metrics.push=true").stdout
    assert out.splitlines()[-1].startswith("200 records sent, "), out
    out = kafka_tools.run("kafka-consumer-perf-test", "--bootstrap-server", bs, "--topic", topic,
                          "--num-records", "200", "--group", unique("telemetry-g"),
                          "--command-property", "enable.metrics.push=true").stdout
    header, row = out.strip().splitlines()[-2:]
    stats = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in row.split(",")],
                     strict=True))
    assert stats["data.consumed.in.nMsg"] == "200", out
    counted = _requests_counted(broker.metrics_url)
    assert {"Produce", "Fetch"} <= counted  # the Java clients' requests are counted
    assert counted & TELEMETRY == set()
    log = broker.log_text(limit=1_000_000)
    # an API the broker does not serve closes the connection with this INFO line: none came
    assert f"api key {int(GET_TELEMETRY_SUBSCRIPTIONS)}" not in log
    assert f"api key {int(PUSH_TELEMETRY)}" not in log
