"""kafka-get-offsets, kafka-delete-records, kafka-log-dirs, kafka-broker-api-versions and
kafka-leader-election against one Strom broker."""

from __future__ import annotations

import json
import re

import pytest

from .. import clients as kc
from ..wire import Conn
from .tools import unique

pytestmark = pytest.mark.timeout(180)


def offsets_of(text: str) -> dict[str, int]:
    """`topic:partition:offset` lines of kafka-get-offsets."""
    out = {}
    for line in text.splitlines():
        tp, _, offset = line.rpartition(":")
        out[tp] = int(offset)
    return out


def test_get_offsets_and_delete_records(kafka_tools, strom_broker, tools_file):
    bs = strom_broker.bootstrap
    topic = unique("offsets")
    kc.create_topic(bs, topic, 2)
    kc.produce(bs, topic, [kc.Msg(None, b"a", timestamp=1_000, partition=0),
                           kc.Msg(None, b"b", timestamp=5_000, partition=0),
                           kc.Msg(None, b"c", timestamp=3_000, partition=0),
                           kc.Msg(None, b"d", timestamp=2_000, partition=1)])

    def get(*args: str) -> dict[str, int]:
        return offsets_of(kafka_tools.run("kafka-get-offsets", "--bootstrap-server", bs,
                                          *args).stdout)

    assert get("--topic", topic) == {f"{topic}:0": 3, f"{topic}:1": 1}
    assert get("--topic", topic, "--time", "-2") == {f"{topic}:0": 0, f"{topic}:1": 0}
    assert get("--topic", topic, "--time", "earliest") == {f"{topic}:0": 0, f"{topic}:1": 0}
    assert get("--topic", topic, "--time", "max-timestamp") == {f"{topic}:0": 1, f"{topic}:1": 0}
    assert get("--topic", topic, "--time", "2500") == {f"{topic}:0": 1}  # p1 has nothing later
    assert get("--topic-partitions", f"{topic}:1") == {f"{topic}:1": 1}
    assert get("--topic", topic, "--partitions", "0", "--time", "-1") == {f"{topic}:0": 3}
    everything = get()
    assert everything[f"{topic}:0"] == 3
    assert not [tp for tp in get("--exclude-internal-topics") if tp.startswith("__")]

    plan = tools_file("offsets.json", json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "offset": 2}]}))
    out = kafka_tools.run("kafka-delete-records", "--bootstrap-server", bs,
                          "--offset-json-file", str(plan)).stdout
    assert f"partition: {topic}-0\tlow_watermark: 2" in out, out
    assert kc.earliest(bs, topic, 0) == 2
    assert kc.consume(bs, topic, 1, offset=2)[0].value == b"c"
    assert get("--topic", topic, "--time", "-2") == {f"{topic}:0": 2, f"{topic}:1": 0}

    beyond = tools_file("beyond.json", json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 1, "offset": 5}]}))
    out = kafka_tools.run("kafka-delete-records", "--bootstrap-server", bs,
                          "--offset-json-file", str(beyond)).stdout
    assert f"partition: {topic}-1\terror: org.apache.kafka.common.errors." \
           "OffsetOutOfRangeException" in out, out
    assert kc.earliest(bs, topic, 1) == 0


def test_log_dirs(kafka_tools, strom_broker):
    bs = strom_broker.bootstrap
    topic = unique("logdirs")
    kc.create_topic(bs, topic, 2)
    kc.produce(bs, topic, [kc.Msg(b"k", b"x" * 500, partition=0) for _ in range(3)])
    out = kafka_tools.run("kafka-log-dirs", "--bootstrap-server", bs, "--describe",
                          "--topic-list", topic).stdout
    lines = out.splitlines()
    assert lines[:2] == ["Querying brokers for log directories information",
                         "Received log directory information from brokers 0"], out
    report = json.loads(lines[2])
    [entry] = report["brokers"]
    [log_dir] = entry["logDirs"]
    assert (entry["broker"], log_dir["logDir"], log_dir["error"]) == (
        0, str(strom_broker.data_dir), None)
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    on_disk = {f"{topic}-{p}": sum(f.stat().st_size for f in
                                   (strom_broker.data_dir / f"{topic}-{p}").glob("*.log"))
               for p in range(2)}
    assert sizes == on_disk and sizes[f"{topic}-0"] > 1500 and sizes[f"{topic}-1"] == 0
    assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in log_dir["partitions"])


API_LINE = re.compile(r"^\t(\w+)\((\d+)\): (?:(\d+)(?: to (\d+))? \[usable: (\d+)\]|UNSUPPORTED),?$")


def test_broker_api_versions(kafka_tools, strom_broker):
    bs = strom_broker.bootstrap
    out = kafka_tools.run("kafka-broker-api-versions", "--bootstrap-server", bs).stdout
    lines = out.splitlines()
    assert lines[0] == f"{bs} (id: 0 rack: null isFenced: false) -> (", out
    listed: dict[str, tuple[int, int] | None] = {}
    keys: dict[str, int] = {}
    for line in lines[1:-1]:
        m = API_LINE.match(line)
        assert m, line
        name, key, lo, hi = m.group(1), int(m.group(2)), m.group(3), m.group(4)
        keys[name] = key
        listed[name] = None if lo is None else (int(lo), int(hi or lo))
    assert lines[-1] == ")"
    with Conn(bs) as conn:
        err, advertised = conn.api_versions_v0()
    assert err == 0
    assert {keys[n]: r for n, r in listed.items() if r is not None} == advertised
    # What the tools of this suite need, as a Kafka 4.4 broker advertises it.
    for name in ("DescribeTopicPartitions", "DescribeProducers", "DescribeLogDirs",
                 "ElectLeaders", "AlterPartitionReassignments", "ListTransactions",
                 "DescribeTransactions", "ConsumerGroupDescribe", "OffsetDelete"):
        assert listed[name] is not None, name


def test_leader_election_single_broker(kafka_tools, strom_broker):
    """One replica per partition: the preferred leader leads already, nothing is elected."""
    bs = strom_broker.bootstrap
    topic = unique("elect")
    kc.create_topic(bs, topic, 2)
    out = kafka_tools.run("kafka-leader-election", "--bootstrap-server", bs, "--election-type",
                          "preferred", "--topic", topic, "--partition", "1")
    assert out.stdout.strip() == f"Valid replica already elected for partitions {topic}-1"
    out = kafka_tools.run("kafka-leader-election", "--bootstrap-server", bs, "--election-type",
                          "unclean", "--all-topic-partitions")
    assert out.stdout.strip() == ""
