"""kafka-console-producer.sh and kafka-console-consumer.sh against one Strom broker."""

from __future__ import annotations

import pytest

from .. import clients as kc
from . import state
from .tools import unique

pytestmark = pytest.mark.timeout(180)

PRINT = ["--formatter-property", "print.key=true", "--formatter-property", "print.headers=true",
         "--formatter-property", "print.partition=true"]  # fmt: skip


def all_records(bs: str, topic: str, partitions: int) -> list[kc.Msg]:
    return [m for p in range(partitions) for m in kc.consume(bs, topic, kc.latest(bs, topic, p),
                                                             partition=p)]


def test_keys_headers_from_beginning_and_group(kafka_tools, strom_broker):
    bs = strom_broker.bootstrap
    topic, group = unique("console"), unique("console-g")
    kc.create_topic(bs, topic, 2)
    run = kafka_tools.run

    run("kafka-console-producer", "--bootstrap-server", bs, "--topic", topic,
        "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
        input="k1:v1\nk2:v2\nk3:v3\n")
    run("kafka-console-producer", "--bootstrap-server", bs, "--topic", topic,
        "--reader-property", "parse.key=true", "--reader-property", "parse.headers=true",
        input="h1:a,h2:b\tk4\tv4\n")
    got = sorted(all_records(bs, topic, 2), key=lambda m: m.key or b"")
    assert [(m.key, m.value, m.headers) for m in got] == [
        (b"k1", b"v1", []), (b"k2", b"v2", []), (b"k3", b"v3", []),
        (b"k4", b"v4", [("h1", b"a"), ("h2", b"b")])]
    partition_of = {m.key: m.partition for m in got}  # what Java's murmur2 partitioner chose

    out = run("kafka-console-consumer", "--bootstrap-server", bs, "--topic", topic,
              "--from-beginning", "--max-messages", "4", "--group", group, *PRINT).stdout
    lines = sorted(line.split("\t") for line in out.splitlines() if line.startswith("Partition:"))
    assert lines == sorted([
        [f"Partition:{partition_of[b'k1']}", "NO_HEADERS", "k1", "v1"],
        [f"Partition:{partition_of[b'k2']}", "NO_HEADERS", "k2", "v2"],
        [f"Partition:{partition_of[b'k3']}", "NO_HEADERS", "k3", "v3"],
        [f"Partition:{partition_of[b'k4']}", "h1:a,h2:b", "k4", "v4"]]), out
    # The group's position is committed when the consumer closes: it resumes after it.
    assert state.committed(bs, group, topic, 2) == [kc.latest(bs, topic, p) for p in range(2)]
    run("kafka-console-producer", "--bootstrap-server", bs, "--topic", topic,
        input="after\n")
    out = run("kafka-console-consumer", "--bootstrap-server", bs, "--topic", topic,
              "--max-messages", "1", "--group", group).stdout
    assert out.splitlines() == ["after"]
    assert sum(state.committed(bs, group, topic, 2)) == 5


def test_partition_offset_and_consumer_protocol_group(kafka_tools, strom_broker):
    bs = strom_broker.bootstrap
    topic, group = unique("console-p"), unique("console-848")
    kc.create_topic(bs, topic, 1)
    kc.produce(bs, topic, [kc.Msg(None, b"m%d" % i, partition=0) for i in range(5)])
    run = kafka_tools.run
    out = run("kafka-console-consumer", "--bootstrap-server", bs, "--topic", topic,
              "--partition", "0", "--offset", "3", "--max-messages", "2",
              "--formatter-property", "print.offset=true").stdout
    assert out.splitlines() == ["Offset:3\tm3", "Offset:4\tm4"]
    # A KIP-848 group (group.protocol=consumer) through the same tool.
    out = run("kafka-console-consumer", "--bootstrap-server", bs, "--topic", topic,
              "--from-beginning", "--max-messages", "5", "--group", group,
              "--command-property", "group.protocol=consumer").stdout
    assert out.splitlines() == [f"m{i}" for i in range(5)]
    assert state.committed(bs, group, topic, 1) == [5]
    # --timeout-ms ends a consumer that waits for records that never come, with exit code 0.
    out = run("kafka-console-consumer", "--bootstrap-server", bs, "--topic", topic,
              "--group", group, "--timeout-ms", "2000").stdout
    assert out.strip() == ""
