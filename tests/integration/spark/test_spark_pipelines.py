"""The reference pipelines end to end: derived feed (known answers) and the data-lake load."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from strom.pipelines.clicks import MINUTE_MS, expected_counts, generate_events, iso_ms
from strom.pipelines.derived_feed import DerivedFeedConfig
from strom.pipelines.derived_feed import run as run_feed
from strom.pipelines.lake_load import LakeLoadConfig, last_commit
from strom.pipelines.lake_load import run as run_load

from .conftest import PYTHON, create_topic, produce, read_all

START = int(datetime(2026, 1, 1, 23, 0, tzinfo=UTC).timestamp() * 1000)
WATERMARK_MS = 10 * MINUTE_MS


def test_derived_feed_counts_and_dead_letters(spark, strom_broker, unique_topic, tmp_path):
    bs = strom_broker.bootstrap
    source = unique_topic("clicks")
    create_topic(bs, source, 3)
    events = list(generate_events(3100, orgs=4, seed=7, start_ms=START, spacing_ms=30_000,
                                  invalid_ratio=0.03))
    produce(bs, source, ({"key": e.key, "value": e.value, "headers": [("src", b"gen")]}
                         for e in events))
    cfg = DerivedFeedConfig(
        bootstrap_servers=bs, source_topic=source, output_topic=f"{source}.visits",
        dead_letter_topic=f"{source}.dlq", parquet_path=str(tmp_path / "visits"),
        checkpoint_dir=str(tmp_path / "ck"), watermark="10 minutes", trigger="available-now",
        max_offsets_per_trigger=1600)
    queries = run_feed(spark, cfg)
    assert all(q.exception() is None for q in queries)

    expected = expected_counts(events)
    # The counts topic: the last value per key is the current count of every window.
    latest: dict[str, dict] = {}
    for r in sorted(read_all(spark, bs, cfg.output_topic), key=lambda r: (r.partition, r.offset)):
        latest[r.key.decode()] = json.loads(r.value)
    got = {(v["granularity"], v["org_id"], v["window_start"]): v["visits"] for v in latest.values()}
    want = {(g, org, iso_ms(ws).replace(".000Z", "Z")): n for (g, org, ws), n in expected.items()}
    assert got == want
    assert {k.split("|")[0] for k in latest} == {"minute", "day"}

    # Parquet: the final count of every window the watermark has closed, nothing else.
    watermark = max(e.ts_ms for e in events if e.valid) - WATERMARK_MS
    size = {"minute": MINUTE_MS, "day": 86_400_000}
    closed = {k: n for k, n in expected.items() if k[2] + size[k[0]] <= watermark}
    rows = spark.read.parquet(cfg.parquet_path).collect()
    parquet = Counter()
    for r in rows:
        key = (r.granularity, r.org_id, int(r.window_start.replace(tzinfo=UTC).timestamp() * 1000))
        parquet[key] += r.visits
    assert dict(parquet) == closed
    assert any(k[0] == "day" for k in closed)  # 2026-01-01 and -02 are complete days
    assert sorted({str(r.date) for r in rows}) == ["2026-01-01", "2026-01-02", "2026-01-03"]

    # Dead letters: every invalid event, with its error and where it came from.
    by_offset = {(r.partition, r.offset): r for r in read_all(spark, bs, source)}
    dead = read_all(spark, bs, cfg.dead_letter_topic, includeHeaders="true")
    assert len(dead) == sum(1 for e in events if not e.valid) > 0
    errors = Counter()
    for d in dead:
        h = {x.key: x.value for x in d.headers}
        assert h["src"] == b"gen"  # the original headers are kept
        assert h["__connect.errors.topic"].decode() == source
        origin = by_offset[(int(h["__connect.errors.partition"]),
                            int(h["__connect.errors.offset"]))]
        assert (origin.key, origin.value) == (d.key, d.value)
        errors[h["__connect.errors.exception.message"].decode().split(":")[0]] += 1
    assert set(errors) <= {"malformed JSON", "missing org_id", "invalid ts", "invalid url"}
    assert len(errors) >= 3


def test_lake_load_is_incremental_and_partitioned_by_date(spark, strom_broker, unique_topic,
                                                          tmp_path):
    bs, topic = strom_broker.bootstrap, unique_topic()
    create_topic(bs, topic, 3)
    day1 = int(datetime(2026, 3, 1, 12, tzinfo=UTC).timestamp() * 1000)
    day2 = day1 + 86_400_000
    produce(bs, topic, ({"partition": i % 3, "value": b"a%d" % i,
                         "timestamp": day1 if i < 150 else day2} for i in range(300)))
    cfg = LakeLoadConfig(bootstrap_servers=bs, topic=topic, output=str(tmp_path / "lake"),
                         min_partitions=4)
    first = run_load(spark, cfg)
    assert first.records == 300 and first.files >= 3
    out = Path(cfg.output)
    assert sorted(p.name for p in out.glob("date=*")) == ["date=2026-03-01", "date=2026-03-02"]
    assert not (out / "_strom_loads").exists() or not any((out / "_strom_loads").iterdir())
    assert last_commit(out)["end"] == {topic: {"0": 100, "1": 100, "2": 100}}

    produce(bs, topic, ({"partition": i % 3, "value": b"b%d" % i, "timestamp": day2}
                        for i in range(60)))
    second = run_load(spark, cfg)
    assert second.records == 60
    assert {tp: off for tp, off in second.start.items()} == {
        (topic, p): 100 for p in range(3)}
    assert run_load(spark, cfg).load_id is None  # nothing new

    rows = spark.read.parquet(cfg.output).collect()
    seen = Counter((r.partition, r.offset) for r in rows)
    assert sorted(seen) == [(p, o) for p in range(3) for o in range(120)]
    assert max(seen.values()) == 1
    assert Counter(str(r.date) for r in rows) == {"2026-03-01": 150, "2026-03-02": 210}


def test_generate_clicks_cli(strom_broker, unique_topic, tmp_path):
    bs, topic = strom_broker.bootstrap, unique_topic()
    create_topic(bs, topic, 2)
    strom = str(Path(PYTHON).with_name("strom"))
    done = subprocess.run([strom, "pipeline", "generate-clicks", "-b", bs, "--topic", topic,
                           "--rate", "4000", "--orgs", "3", "--count", "800", "--seed", "5"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "800 delivered, 0 failed" in done.stderr
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": "unused", "enable.auto.commit": False})
    try:
        highs = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)]
    finally:
        c.close()
    assert sum(highs) == 800
    bad = subprocess.run([strom, "pipeline", "run", "nope"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "unknown pipeline" in bad.stderr
