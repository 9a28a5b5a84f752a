"""kafka-producer-perf-test, kafka-consumer-perf-test, kafka-verifiable-producer and
kafka-verifiable-consumer (tiny counts) against one Strom broker."""

from __future__ import annotations

import json

import pytest

from .. import clients as kc
from . import state
from .tools import unique

pytestmark = pytest.mark.timeout(180)


def events(text: str) -> list[dict]:
    """The JSON lines the verifiable clients print (one event each)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def total(bs: str, topic: str, partitions: int) -> int:
    return sum(kc.latest(bs, topic, p) - kc.earliest(bs, topic, p) for p in range(partitions))


def test_perf_tests(kafka_tools, strom_broker):
    bs = strom_broker.bootstrap
    topic, txn_topic = unique("perf"), unique("perf-txn")
    kc.create_topic(bs, topic, 2)
    kc.create_topic(bs, txn_topic, 1)

    out = kafka_tools.run("kafka-producer-perf-test", "--topic", topic, "--num-records", "500",
                          "--record-size", "100", "--throughput", "-1",
                          "--command-property", f"bootstrap.servers={bs}", "acks=all").stdout
    assert out.splitlines()[-1].startswith("500 records sent, "), out
    assert total(bs, topic, 2) == 500
    filled = next(p for p in range(2) if kc.latest(bs, topic, p) > 0)  # sticky partitioner
    assert {len(m.value) for m in kc.consume(bs, topic, 3, partition=filled)} == {100}

    out = kafka_tools.run("kafka-producer-perf-test", "--topic", txn_topic, "--num-records",
                          "200", "--record-size", "10", "--throughput", "-1",
                          "--transactional-id", unique("perf-tx"),
                          "--transaction-duration-ms", "50",
                          "--command-property", f"bootstrap.servers={bs}").stdout
    assert out.splitlines()[-1].startswith("200 records sent, "), out
    assert len(kc.read_partition(bs, txn_topic, isolation="read_committed")) == 200

    group = unique("perf-g")
    out = kafka_tools.run("kafka-consumer-perf-test", "--bootstrap-server", bs, "--topic", topic,
                          "--num-records", "500", "--group", group).stdout
    header, row = out.strip().splitlines()[-2:]
    stats = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in row.split(",")],
                     strict=True))
    assert stats["data.consumed.in.nMsg"] == "500", out
    assert float(stats["data.consumed.in.MB"]) == pytest.approx(500 * 100 / 1024 / 1024, 0.01)


def test_verifiable_producer_and_consumers(kafka_tools, strom_broker):
    bs = strom_broker.bootstrap
    topic = unique("verifiable")
    kc.create_topic(bs, topic, 2)
    out = kafka_tools.run("kafka-verifiable-producer", "--bootstrap-server", bs, "--topic", topic,
                          "--max-messages", "20", "--acks", "-1", "--repeating-keys", "5").stdout
    sent = events(out)
    acked = [e for e in sent if e["name"] == "producer_send_success"]
    assert sorted(int(e["value"]) for e in acked) == list(range(20))
    assert sent[-1]["name"] == "tool_data" and (sent[-1]["sent"], sent[-1]["acked"]) == (20, 20)
    assert total(bs, topic, 2) == 20
    assert {e["partition"] for e in acked} == {0, 1}  # keys 0-4 hash to both partitions
    for e in acked[:3]:
        [m] = kc.consume(bs, topic, 1, partition=e["partition"], offset=e["offset"])
        assert (m.key, m.value) == (e["key"].encode(), e["value"].encode())

    for protocol in ("classic", "consumer"):
        group = unique(f"verifiable-{protocol}")
        out = kafka_tools.run("kafka-verifiable-consumer", "--bootstrap-server", bs,
                              "--topic", topic, "--group-id", group, "--group-protocol",
                              protocol, "--max-messages", "20", "--reset-policy", "earliest").stdout
        seen = events(out)
        names = [e["name"] for e in seen]
        assert names[0] == "startup_complete" and "shutdown_complete" in names, names
        assigned = [p for e in seen if e["name"] == "partitions_assigned"
                    for p in e["partitions"]]
        assert sorted(p["partition"] for p in assigned) == [0, 1]
        consumed = sum(e["count"] for e in seen if e["name"] == "records_consumed")
        assert consumed == 20, out
        commits = [e for e in seen if e["name"] == "offsets_committed"]
        assert commits and all(e["success"] for e in commits), commits
        assert state.committed(bs, group, topic, 2) == [kc.latest(bs, topic, p) for p in range(2)]
