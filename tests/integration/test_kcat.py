"""kcat (librdkafka 2.16 via the confluent-kafka wheel) against the broker: produce, consume, list."""

from __future__ import annotations

import json
import re

import pytest

from . import clients as kc

pytestmark = pytest.mark.timeout(90)

LINES = ["k1:v1", "k2:value:with:colons", "ключ:значение ✓", "k4:", "k5:last"]


def test_produce_and_consume_with_keys(strom_broker, kcat, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    kcat.run("-b", bs, "-t", topic, "-P", "-K:", "-p", "0", input="\n".join(LINES).encode() + b"\n")

    out = kcat.run("-b", bs, "-t", topic, "-C", "-e", "-o", "beginning", "-K:", "-q")
    assert out.stdout.decode().splitlines() == LINES

    # The same records seen by another client: key split at the first ':'.
    got = kc.consume(bs, topic, len(LINES))
    assert [(m.key, m.value) for m in got] == [
        tuple(part.encode() for part in line.split(":", 1)) for line in LINES
    ]


def test_consume_format_and_offsets(strom_broker, kcat, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, partitions=2)
    kc.produce(bs, topic, [kc.Msg(b"a", b"1"), kc.Msg(b"b", b"2"), kc.Msg(b"c", b"3")], partition=1)
    out = kcat.run(
        "-b", bs, "-t", topic, "-C", "-e", "-p", "1", "-o", "1", "-q",
        "-f", "%t|%p|%o|%k|%s\n",
    )  # fmt: skip
    assert out.stdout.decode().splitlines() == [f"{topic}|1|1|b|2", f"{topic}|1|2|c|3"]


def test_produce_compressed(strom_broker, kcat, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic)
    values = [f"compressed-{i}" * 20 for i in range(50)]
    kcat.run(
        "-b", bs, "-t", topic, "-P", "-p", "0", "-z", "zstd", "-X", "linger.ms=50",
        input=("\n".join(values) + "\n").encode(),
    )  # fmt: skip
    assert [m.value.decode() for m in kc.consume(bs, topic, len(values))] == values


def test_metadata_listing(strom_broker, kcat, unique_topic):
    bs = strom_broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, partitions=3)
    out = kcat.run("-b", bs, "-L").stdout.decode()
    assert re.search(r"^ 1 brokers:$", out, re.M), out
    assert re.search(rf"broker \d+ at 127\.0\.0\.1:{strom_broker.port}", out), out
    assert f' topic "{topic}" with 3 partitions:' in out, out
    for p in range(3):
        assert re.search(rf"partition {p}, leader \d+, replicas: \d+, isrs: \d+", out), out

    one = kcat.run("-b", bs, "-L", "-t", topic, "-J").stdout.decode()
    md = json.loads(one)
    [t] = md["topics"]
    assert t["topic"] == topic and len(t["partitions"]) == 3
    assert [b["name"] for b in md["brokers"]] == [f"127.0.0.1:{strom_broker.port}"]
