"""The `strom` command line against a real broker, run as a user runs it (a subprocess).

Effects are checked with an independent client (confluent-kafka) where it matters, and consumed
content is compared exactly through `--format json`.
"""

from __future__ import annotations

import base64
import json
import os
import random
import selectors
import signal
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import ConfigResource, ConfigSource

from . import clients as kc
from .broker import STROM_BIN, running_peer

pytestmark = pytest.mark.timeout(240)

T = 90  # seconds any single CLI call may take


def strom(bootstrap: str | None, *args: str | Path, input: bytes | None = None,
          check: bool = True) -> subprocess.CompletedProcess[bytes]:
    argv = [str(STROM_BIN), *map(str, args)]
    if bootstrap is not None:
        argv += ["--bootstrap-server", bootstrap]
    proc = subprocess.run(argv, input=input, capture_output=True, timeout=T,
                          stdin=None if input is not None else subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {proc.returncode}\n"
                             f"stdout: {proc.stdout.decode(errors='replace')}\n"
                             f"stderr: {proc.stderr.decode(errors='replace')}")
    assert b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")
    return proc


def one_error_line(proc: subprocess.CompletedProcess[bytes]) -> str:
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("Error: "), lines[0]
    return lines[0]


def topic_configs(bs: str, topic: str) -> dict:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    a = kc.admin(bs)  # keep the handle alive until the future resolves
    return a.describe_configs([res], request_timeout=30)[res].result(30)


def wait_until(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)  # poll interval, not synchronisation


def consume_json(bs: str, topic: str, n: int, *extra: str, idle_ms: int = 20000) -> list[dict]:
    proc = strom(bs, "consume", topic, "--from-beginning", "--format", "json",
                 "--max-messages", str(n), "--timeout-ms", str(idle_ms), *extra)
    records = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert len(records) == n, (records, proc.stderr)
    assert proc.stderr.decode().strip().endswith(f"Processed a total of {n} messages")
    return records


def essentials(records: list[dict]) -> list[tuple]:
    return [(r["partition"], r["offset"], r["key"], r["value"],
             [(h["key"], h["value"]) for h in r["headers"]]) for r in records]


# --------------------------------------------------------------------------- topics


def test_topic_lifecycle(strom_broker, unique_topic, peer):
    bs = strom_broker.bootstrap
    topic = unique_topic("cli")

    out = strom(bs, "topics", "create", topic, "--partitions", "3", "--replication-factor", "1",
                "--config", "retention.ms=3600000", "--config", "cleanup.policy=compact,delete")
    assert out.stdout.decode().strip() == f"Created topic {topic}."
    kc.wait_for_topic(bs, topic, 3)
    configs = topic_configs(bs, topic)
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "compact,delete"

    assert topic in strom(bs, "topics", "list").stdout.decode().splitlines()

    desc = strom(bs, "topics", "describe", topic).stdout.decode()
    expected_id = kc.topic_id(bs, topic).rstrip("=").replace("+", "-").replace("/", "_")
    header = desc.splitlines()[0]
    assert f"Topic: {topic}" in header and f"TopicId: {expected_id}" in header
    assert "PartitionCount: 3" in header and "ReplicationFactor: 1" in header
    if peer is None:  # Tansu reports topic overrides with source DEFAULT_CONFIG
        assert "retention.ms=3600000" in header
    rows = [line.split() for line in desc.splitlines()[2:] if line.strip()]
    assert [r[0] for r in rows] == ["0", "1", "2"]
    assert all(r[1] == r[2] == r[3] for r in rows)  # leader == replicas == isr on one broker

    again = strom(bs, "topics", "create", topic, check=False)
    assert again.returncode == 1
    assert one_error_line(again) == f"Error: Topic '{topic}' already exists."
    strom(bs, "topics", "create", topic, "--if-not-exists")

    if peer is None:  # Tansu has no CreatePartitions
        strom(bs, "topics", "alter", topic, "--partitions", "5")
        kc.wait_for_topic(bs, topic, 5)
    shrink = strom(bs, "topics", "alter", topic, "--partitions", "2", check=False)
    assert shrink.returncode == 1 and "can only grow" in one_error_line(shrink)

    strom(bs, "topics", "alter", topic, "--config", "retention.ms=7200000", "--delete-config",
          "cleanup.policy")
    configs = topic_configs(bs, topic)
    assert configs["retention.ms"].value == "7200000"
    if peer is None:
        assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        assert configs["cleanup.policy"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    strom(bs, "topics", "delete", topic)
    wait_until(lambda: topic not in kc.topic_names(bs), f"{topic} to disappear")
    gone = strom(bs, "topics", "delete", topic, check=False)
    assert gone.returncode == 1
    assert one_error_line(gone) == f"Error: Topic '{topic}' does not exist."
    strom(bs, "topics", "delete", topic, "--if-exists")
    missing = strom(bs, "topics", "describe", topic, check=False)
    assert missing.returncode == 1
    assert one_error_line(missing) == f"Error: Topic '{topic}' does not exist."


def test_create_validate_only_and_broker_errors(strom_broker, unique_topic, peer):
    bs = strom_broker.bootstrap
    topic = unique_topic("cli")
    if peer is not None:
        pytest.skip("Tansu creates the topic even with validate_only")
    out = strom(bs, "topics", "create", topic, "--partitions", "2", "--validate-only")
    assert "validate only" in out.stdout.decode()
    assert topic not in kc.topic_names(bs)
    bad = strom(bs, "topics", "create", topic, "--config", "retention.ms=soon", check=False)
    assert bad.returncode == 1
    assert "INVALID_CONFIG" in one_error_line(bad)
    assert topic not in kc.topic_names(bs)


def test_configs_describe_and_alter(strom_broker, unique_topic, peer):
    bs = strom_broker.bootstrap
    topic = unique_topic("cli")
    kc.create_topic(bs, topic, 1)
    strom(bs, "configs", "alter", "--topic", topic, "--add-config",
          "retention.ms=60000,cleanup.policy=[compact,delete]")
    configs = topic_configs(bs, topic)
    assert configs["retention.ms"].value == "60000"
    assert configs["cleanup.policy"].value == "compact,delete"

    dynamic = strom(bs, "configs", "describe", "--topic", topic).stdout.decode()
    assert dynamic.splitlines()[0] == f"Dynamic configs for topic {topic}:"
    everything = strom(bs, "configs", "describe", "--topic", topic, "--all").stdout.decode()
    assert everything.splitlines()[0] == f"All configs for topic {topic}:"
    assert "retention.ms" in everything and "60000" in everything
    if peer is None:  # Tansu reports every topic config with source DEFAULT_CONFIG
        assert "retention.ms" in dynamic and "DYNAMIC_TOPIC_CONFIG" in dynamic
        assert "segment.bytes" not in dynamic
        assert "segment.bytes" in everything and "DEFAULT_CONFIG" in everything

    strom(bs, "configs", "alter", "--topic", topic, "--delete-config", "retention.ms,cleanup.policy")
    configs = topic_configs(bs, topic)
    if peer is None:
        assert configs["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    broker = strom(bs, "configs", "describe", "--broker", "1", "--all", check=False)
    # Whatever the broker id, the command either lists configs or names the problem in one line.
    if broker.returncode == 0:
        assert "All configs for broker 1:" in broker.stdout.decode()
    else:
        assert "broker 1 is not in the cluster" in one_error_line(broker)
    unknown = strom(bs, "configs", "alter", "--broker", "4711", "--add-config",
                    "log.cleaner.threads=2", check=False)
    assert unknown.returncode != 0
    assert "broker 4711 is not in the cluster (its brokers: " in one_error_line(unknown)


def test_configs_of_the_cluster_wide_broker_defaults(make_broker):
    """Kafka names the defaults with an empty broker name, which librdkafka cannot send: the
    CLI speaks DescribeConfigs and IncrementalAlterConfigs itself for them."""
    bs = make_broker().bootstrap
    empty = strom(bs, "configs", "describe", "--broker-defaults").stdout.decode()
    assert empty.splitlines() == ["Dynamic configs for the default broker:", "  (none)"]
    strom(bs, "configs", "alter", "--broker-defaults", "--add-config",
          "message.max.bytes=2000,log.retention.ms=7200000")
    shown = strom(bs, "configs", "describe", "--broker-defaults").stdout.decode()
    rows = {line.split()[0]: line.split()[1:3] for line in shown.splitlines()[2:]}
    assert rows == {"log.retention.ms": ["7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG"],
                    "message.max.bytes": ["2000", "DYNAMIC_DEFAULT_BROKER_CONFIG"]}
    # the broker itself now reports the default as the source of its value
    broker = strom(bs, "configs", "describe", "--broker", "0").stdout.decode()
    assert "message.max.bytes" in broker and "DYNAMIC_DEFAULT_BROKER_CONFIG" in broker

    bad = strom(bs, "configs", "alter", "--broker-defaults", "--add-config", "no.such.config=1",
                check=False)
    assert bad.returncode != 0
    assert "no.such.config" in one_error_line(bad)

    strom(bs, "configs", "alter", "--broker-defaults", "--delete-config",
          "message.max.bytes,log.retention.ms")
    again = strom(bs, "configs", "describe", "--broker-defaults").stdout.decode()
    assert again.splitlines()[1:] == ["  (none)"]


# --------------------------------------------------------------------------- produce / consume


def test_produce_stdin_with_keys_and_headers_then_consume_json(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic("cli")
    kc.create_topic(bs, topic, 1)
    lines = "k1:v1\nk2:value:with:colons\n:empty key\nключ:значение ✓\nk5:\n".encode()
    proc = strom(bs, "produce", topic, "--parse-key", "--key-separator", ":", "--header", "src=cli",
                 "--header", "n=1", input=lines)
    assert proc.stderr.decode().strip() == f"Delivered 5 records to {topic}."
    records = consume_json(bs, topic, 5)
    assert essentials(records) == [
        (0, 0, "k1", "v1", [("src", "cli"), ("n", "1")]),
        (0, 1, "k2", "value:with:colons", [("src", "cli"), ("n", "1")]),
        (0, 2, "", "empty key", [("src", "cli"), ("n", "1")]),
        (0, 3, "ключ", "значение ✓", [("src", "cli"), ("n", "1")]),
        (0, 4, "k5", "", [("src", "cli"), ("n", "1")]),
    ]
    assert all(r["topic"] == topic and r["timestamp_type"] == "CreateTime" for r in records)
    assert all(isinstance(r["timestamp"], int) and r["timestamp"] > 0 for r in records)
    assert not any(r["key_base64"] or r["value_base64"] for r in records)


def test_produce_file_with_kafka_properties_then_consume(strom_broker, unique_topic, tmp_path):
    bs = strom_broker.bootstrap
    topic = unique_topic("cli")
    kc.create_topic(bs, topic, 1)
    data = tmp_path / "records.txt"
    data.write_bytes(
        b"h1:a,h2:b\tkey-1\tvalue-1\n"
        b"NULL\tkey-2\t\xff\xfebinary\r\n"
        b"h:NULL\tNULL\tnull key\n"
        b"x:y\tkey-4\tNULL"  # last line without a newline still counts
    )
    proc = strom(bs, "produce", topic, "--file", data, "--compression", "gzip", "--acks", "1",
                 "--property", "parse.headers=true", "--property", "parse.key=true",
                 "--property", "null.marker=NULL", "--producer-property", "linger.ms=50")
    assert proc.stderr.decode().strip() == f"Delivered 4 records to {topic}."
    records = consume_json(bs, topic, 4)
    assert essentials(records) == [
        (0, 0, "key-1", "value-1", [("h1", "a"), ("h2", "b")]),
        (0, 1, "key-2", base64.b64encode(b"\xff\xfebinary").decode(), []),
        (0, 2, None, "null key", [("h", None)]),
        (0, 3, "key-4", None, [("x", "y")]),
    ]
    assert records[1]["value_base64"] is True and records[0]["value_base64"] is False

    text = strom(bs, "consume", topic, "--from-beginning", "--max-messages", "4", "--timeout-ms",
                 "20000", "--print-key", "--print-offset", "--print-headers").stdout
    assert text.splitlines() == [
        b"Offset:0\th1:a,h2:b\tkey-1\tvalue-1",
        b"Offset:1\tNO_HEADERS\tkey-2\t\xff\xfebinary",
        b"Offset:2\th:null\tnull\tnull key",
        b"Offset:3\tx:y\tkey-4\tnull",
    ]


def test_produce_reports_failures(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic("cli")
    kc.create_topic(bs, topic, 2)
    proc = strom(bs, "produce", topic, "-K", "--key-separator", "=", input=b"a=1\nno separator\nb=2\n",
                 check=False)
    assert proc.returncode == 1
    err = proc.stderr.decode()
    assert "line 2: no key separator found" in err
    assert f"delivered 2 of 3 records to {topic}, 1 failed" in err
    everything = strom(bs, "consume", topic, "--from-beginning", "--exit-at-end", "--print-key")
    assert sorted(everything.stdout.splitlines()) == [b"a\t1", b"b\t2"]

    bad = strom(bs, "produce", topic, "--partition", "7", input=b"x\n", check=False)
    assert bad.returncode == 1
    assert one_error_line(bad) == f"Error: Topic '{topic}' has no partition 7 (it has 2)."


def test_consume_partition_offset_and_exit_at_end(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic("cli")
    kc.create_topic(bs, topic, 2)
    strom(bs, "produce", topic, "--partition", "1", input=b"a\nb\nc\nd\n")
    proc = strom(bs, "consume", topic, "--partition", "1", "--offset", "2", "--exit-at-end",
                 "--print-partition", "--print-offset")
    assert proc.stdout.splitlines() == [b"Partition:1\tOffset:2\tc", b"Partition:1\tOffset:3\td"]
    empty = strom(bs, "consume", topic, "--partition", "0", "--offset", "earliest", "--exit-at-end")
    assert empty.stdout == b""
    assert empty.stderr.decode().strip() == "Processed a total of 0 messages"
    unknown = strom(bs, "consume", unique_topic("missing"), "--timeout-ms", "2000", check=False)
    # With auto-create on, a subscription-free read may create the topic; without it, a clear error.
    if unknown.returncode != 0:
        assert "does not exist" in one_error_line(unknown)


def test_consume_group_commits_offsets(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic("cli")
    group = unique_topic("group")
    kc.create_topic(bs, topic, 1)
    strom(bs, "produce", topic, input=b"".join(b"m%d\n" % i for i in range(6)))
    # Joining a group takes a rebalance (and group.initial.rebalance.delay.ms): a longer idle limit.
    first = consume_json(bs, topic, 4, "--group", group, idle_ms=45000)
    assert [r["value"] for r in first] == ["m0", "m1", "m2", "m3"]
    # The group resumes after what it committed; --from-beginning only applies without commits.
    rest = consume_json(bs, topic, 2, "--group", group, idle_ms=45000)
    assert [r["value"] for r in rest] == ["m4", "m5"]


def read_lines(proc: subprocess.Popen, n: int, timeout: float = T) -> list[bytes]:
    """The first `n` lines a running command prints, waiting at most `timeout` seconds."""
    data = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while data.count(b"\n") < n:
            left = deadline - time.monotonic()
            if left <= 0 or proc.poll() is not None:
                raise AssertionError(f"{n} lines not printed in time: {data!r}")
            if sel.select(left):
                data += os.read(proc.stdout.fileno(), 65536)
    return data.splitlines()[:n]


@pytest.mark.parametrize(("sig", "exit_code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_consume_group_commits_and_leaves_on_a_signal(strom_broker, unique_topic, sig, exit_code):
    """SIGTERM and Ctrl-C stop a group consumer cleanly: the offsets of what it printed are
    committed and the member leaves at once, instead of after its 45 s session timeout."""
    bs = strom_broker.bootstrap
    topic, group = unique_topic("cli"), unique_topic("group")
    kc.create_topic(bs, topic, 1)
    strom(bs, "produce", topic, input=b"".join(b"m%d\n" % i for i in range(5)))
    argv = [str(STROM_BIN), "consume", topic, "--group", group, "--from-beginning",
            "--format", "json", "--bootstrap-server", bs]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        printed = [json.loads(line)["value"] for line in read_lines(proc, 5)]
        assert printed == [f"m{i}" for i in range(5)]
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=T)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == exit_code, stderr
    assert stderr.decode().strip().endswith("Processed a total of 5 messages"), stderr
    admin = kc.admin(bs)
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    committed = admin.list_consumer_group_offsets([request])[group].result(T)
    assert [tp.offset for tp in committed.topic_partitions] == [5]
    described = admin.describe_consumer_groups([group])[group].result(T)  # at once: no polling
    assert described.members == [] and described.state == ConsumerGroupState.EMPTY


# --------------------------------------------------------------------------- dump-log


def test_dump_log_on_broker_data_dir(strom_broker, unique_topic, tmp_path):
    if running_peer():
        pytest.skip("the peer broker keeps its log in memory: no segment files to dump")
    bs = strom_broker.bootstrap
    topic = unique_topic("cli")
    kc.create_topic(bs, topic, 1)
    rng = random.Random(7)  # hex noise: gzip cannot shrink it below log.index.interval.bytes
    values = [f"record-{i:04d}-" + rng.randbytes(100).hex() for i in range(300)]
    data = tmp_path / "in.txt"
    data.write_text("".join(f"k{i}\t{v}\n" for i, v in enumerate(values)))
    strom(bs, "produce", topic, "--file", data, "--parse-key", "--compression", "gzip")
    strom(bs, "produce", topic, "-K", "--header", "h=v", input=b"k300\tlast\n")
    part_dir = strom_broker.data_dir / f"{topic}-0"
    wait_until(lambda: any(part_dir.glob("*.log")), "a segment file")

    def dumped() -> tuple[list[dict], list[dict]]:
        proc = strom(None, "dump-log", part_dir, "--print-data", "--format", "json")
        objs = [json.loads(line) for line in proc.stdout.decode().splitlines()]
        assert not [o for o in objs if "problem" in o], objs
        batches = [o for o in objs if o["file"].endswith(".log") and "baseOffset" in o]
        indexes = [o for o in objs if o["file"].endswith(".index")]
        return batches, indexes

    batches, _ = dumped()
    records = [r for b in batches for r in b["records"]]
    assert [r["offset"] for r in records] == list(range(301))
    assert [r["payload"] for r in records] == [*values, "last"]
    assert [r["key"] for r in records] == [f"k{i}" for i in range(301)]
    assert records[-1]["headers"] == {"h": "v"}
    assert all(b["isvalid"] and b["magic"] == 2 for b in batches)
    assert batches[0]["compresscodec"] == "gzip" and batches[-1]["compresscodec"] == "none"
    positions = [b["position"] for b in batches]
    assert positions[0] == 0
    assert all(p + b["size"] == q for p, b, q in zip(positions, batches, positions[1:], strict=False))

    # After a clean stop the indexes are on disk too, and every entry points at the right batch.
    strom_broker.restart()
    batches_after, indexes = dumped()
    assert [b["baseOffset"] for b in batches_after] == [b["baseOffset"] for b in batches]
    # >30 KB then a small batch: past log.index.interval.bytes (4096), so at least one entry.
    assert indexes, "no offset index entries after a clean stop"
    by_position = {b["position"]: b for b in batches_after}
    for entry in indexes:
        batch = by_position[entry["position"]]
        assert batch["baseOffset"] <= entry["offset"] <= batch["lastOffset"]

    text = strom(None, "dump-log", part_dir / f"{0:020d}.log").stdout.decode()
    assert text.splitlines()[0].startswith("Dumping ")
    assert "baseOffset: 0 " in text and "isvalid: true" in text


# --------------------------------------------------------------------------- reassignments


def test_reassign_partitions_on_a_single_broker(strom_broker, unique_topic, tmp_path):
    """One broker: the only possible replica set is that broker, which completes at once;
    anything else is refused with one line, before anything is sent."""
    if running_peer():
        pytest.skip("the peer broker has no partition reassignment APIs")
    bs = strom_broker.bootstrap
    topic = unique_topic("reassign")
    kc.create_topic(bs, topic, 2)
    me = kc.admin(bs).list_topics(timeout=10).controller_id
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": [me]} for p in (0, 1)]}))
    out = strom(bs, "reassign-partitions", "--execute", "--reassignment-json-file", plan,
                "--wait").stdout.decode()
    assert f"Successfully started partition reassignments for {topic}-0,{topic}-1" in out
    verify = strom(bs, "reassign-partitions", "--verify", "--reassignment-json-file",
                   plan).stdout.decode()
    assert f"Reassignment of partition {topic}-1 is completed." in verify
    assert "No partition reassignments found." in strom(
        bs, "reassign-partitions", "--list").stdout.decode()

    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [me, me + 1]}]}))
    bad = strom(bs, "reassign-partitions", "--execute", "--reassignment-json-file", plan,
                check=False)
    assert bad.returncode == 1 and f"unknown broker(s) [{me + 1}]" in one_error_line(bad)
    plan.write_text("{not json")
    bad = strom(bs, "reassign-partitions", "--verify", "--reassignment-json-file", plan,
                check=False)
    assert bad.returncode == 2 and "is not valid JSON" in one_error_line(bad)
    bad = strom(bs, "reassign-partitions", "--execute", "--list", check=False)
    assert bad.returncode == 2 and "choose exactly one" in one_error_line(bad)
