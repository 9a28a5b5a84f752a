"""The benchmark chart's data: read from a run's outcomes or back from its saved report."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import pytest

# bench/ lives at the repository root, outside the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench import chart, config, run
from bench.brokers import BrokerSpec, strom_spec, tansu_spec
from bench.chart import Entry, broker_groups, parse_cell, parse_unit, ratio_bars, short_scenario
from bench.report import Outcome, Stat
from bench.runner import Results
from bench.scenarios import BY_NAME, Scenario


def test_parse_cell_reads_the_table_cells() -> None:
    assert parse_cell("1,171,503 (812,090-1,177,886)", 3) == Stat(1171503, 812090, 1177886, 3)
    assert parse_cell("754.9", 1) == Stat(754.9, 754.9, 754.9, 1)
    assert parse_cell(" 0.30 (0.27-0.35) ", 3) == Stat(0.30, 0.27, 0.35, 3)
    for text in ("FAILED (1/3)", "n/a", "-", ""):
        assert parse_cell(text, 3) is None


def test_parse_unit_knows_only_the_units_it_charts() -> None:
    assert parse_unit("produce (MB/s)") == "MB/s"
    assert parse_unit("produce (records/broker-CPU-s)") == "records/broker-CPU-s"
    assert parse_unit("broker CPU (% of a core)") == "% of a core"
    assert parse_unit("producers over 50 ms (librdkafka's 100 ms metadata retry)") == ""
    assert parse_unit("total time") == ""


def test_short_scenario_names() -> None:
    titles = {
        "produce+consume 1 KiB, 6 partitions, acks=all (300,000 records)": "1 KiB acks=all",
        "produce+consume 100 B, 6 partitions, acks=1 (1,000,000 records)": "100 B acks=1",
        "end-to-end latency, 5,000 records/s of 1 KiB for 12 s (linger.ms=0)": (
            "end-to-end latency"
        ),
        "1,000-partition topic: create, produce 100 x 100 B each, consume all": (
            "1,000-partition topic"
        ),
        "10,000-partition broker (1 record per partition)": "10,000-partition broker",
    }
    for title, short in titles.items():
        assert short_scenario(title) == short


def _entry(metric: str, unit: str, s: float | None, p: float | None, judged: bool) -> Entry:
    def stat(x: float | None) -> Stat | None:
        return None if x is None else Stat(x, x * 0.9, x * 1.1, 3)

    return Entry(
        "produce+consume 1 KiB, 6 partitions, acks=1", metric, unit, stat(s), (stat(p),), judged
    )


def test_which_broker_is_better_depends_on_the_unit() -> None:
    assert _entry("produce (MB/s)", "MB/s", 200, 100, True).subject_better is True
    assert _entry("produce (MB/s)", "MB/s", 50, 100, True).subject_better is False
    assert _entry("p50 (ms)", "ms", 0.3, 800, True).subject_better is True
    assert _entry("broker peak RSS (MB)", "MB", 140, 40, True).subject_better is False
    assert _entry("slow producers", "", 1, 2, False).subject_better is None
    assert _entry("produce (MB/s)", "MB/s", 200, None, True).subject_better is None


def test_bars_and_groups_pick_their_rows() -> None:
    entries = [
        _entry("produce (MB/s)", "MB/s", 200, 100, True),
        _entry("flush() after the last produce() (s)", "s", 0.15, 0.15, False),
        _entry("consume (MB/s)", "MB/s", 300, None, True),  # the peer failed
        _entry("p50 (ms)", "ms", None, None, True),  # neither measured
        _entry("broker peak RSS (MB)", "MB", 70, 350, True),
    ]
    bars = ratio_bars(entries)
    assert [(b.label, b.ratio, b.subject_better) for b in bars] == [
        ("1 KiB acks=1: produce (MB/s)", 2.0, True),
        ("1 KiB acks=1: broker peak RSS (MB)", 0.2, True),
    ]
    groups = broker_groups(entries, "MB/s")
    assert [g.label for g in groups] == ["1 KiB acks=1: produce", "1 KiB acks=1: consume"]
    assert groups[1].peer is None and groups[1].subject is not None
    assert broker_groups(entries, "ms") == []


def _fake_run() -> tuple[list[Scenario], Results]:
    """Outcomes for three real scenarios: integers, so the report prints them exactly."""
    scenarios = [BY_NAME[n] for n in ("produce-1k", "e2e-latency", "partitions-10k")]
    results = Results(seconds=90.0)
    for k, sc in enumerate(scenarios):
        keys = [m.key for m in sc.rows(config.FULL).metrics]
        for r in range(3):
            results.add(
                sc.name, "Strom", Outcome({key: 100 * k + 3 * i + r for i, key in enumerate(keys)})
            )
            peer = Outcome({key: 50 * k + 7 * i + 2 * r + 1 for i, key in enumerate(keys)})
            if sc.name == "partitions-10k":
                peer.na = {"start_clean_s": "memory storage", "start_kill9_s": "memory storage"}
            if sc.name == "e2e-latency" and r == 1:
                peer.failed = "consumed 9 of 10 records"
            results.add(sc.name, "Tansu", peer)
    return scenarios, results


def test_a_saved_report_gives_the_same_chart_as_the_run() -> None:
    scenarios, results = _fake_run()
    subject, peer = strom_spec("strom"), tansu_spec("tansu", version="tansu 0.6.0")
    text = run.compose(
        scenarios,
        results,
        subject,
        peer,
        config.FULL,
        3,
        dt.datetime(2026, 11, 24, 22, 6),
        ("1.89 1.63 1.47", "1.52 1.58 1.50"),
        "python -m bench",
    )
    title = chart.title_from_report(text)
    live = chart.from_results(
        run._table(scenarios, config.FULL), results.runs, "Strom", "Tansu", title
    )
    saved = chart.from_markdown(text)
    assert saved == live
    assert title.startswith("Strom vs. Tansu - 2026-11-24 22:06 (tansu 0.6.0)")
    assert title.splitlines()[1].endswith(
        "load average 1.89 1.63 1.47 at start, 1.52 1.58 1.50 at end; 3 round(s), bars are medians"
    )
    assert "- Command: `python -m bench`." in text
    # The failed latency runs and the in-memory restart have no numbers, the rest all do.
    latency = [e for e in saved.entries if e.scenario.startswith("end-to-end")]
    assert latency and all(e.peer is None and e.subject is not None for e in latency)
    restart = [e for e in saved.entries if e.metric.startswith("start-up")]
    assert len(restart) == 2 and all(e.peer is None for e in restart)
    assert sum(e.ratio is not None for e in saved.entries) == len(saved.entries) - len(
        latency
    ) - len(restart)


def test_from_markdown_rejects_other_files() -> None:
    with pytest.raises(ValueError, match="not a python -m bench report"):
        chart.from_markdown("# TLS fetch\n\n| listener | MB/s |\n|---|---|\n")


def test_draw_writes_the_same_svg_every_time(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    scenarios, results = _fake_run()
    data = chart.from_results(
        run._table(scenarios, config.FULL), results.runs, "Strom", "Tansu", "a title\nline two"
    )
    one, two, png = tmp_path / "one.svg", tmp_path / "two.svg", tmp_path / "c.png"
    chart.draw(data, one)
    chart.draw(data, two)
    chart.draw(data, png)
    assert one.read_bytes() == two.read_bytes()
    assert b"<svg" in one.read_bytes()[:1000] and b"a title" in one.read_bytes()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _two_peer_run() -> tuple[list[Scenario], Results]:
    """produce-1k with Strom, Tansu and Kafka: Kafka a little slower than Strom, Tansu slower."""
    scenarios = [BY_NAME["produce-1k"]]
    results = Results(seconds=60.0)
    keys = [m.key for m in scenarios[0].rows(config.FULL).metrics]
    for who, base in (("Strom", 200), ("Tansu", 50), ("Kafka", 100)):
        for r in range(3):
            results.add("produce-1k", who, Outcome({k: base + r for k in keys}))
    return scenarios, results


def test_two_peers_round_trip_through_the_report() -> None:
    scenarios, results = _two_peer_run()
    subject = strom_spec("strom")
    peers = [tansu_spec("tansu", version="tansu 0.6.0"), _kafka_like()]
    text = run.compose(
        scenarios,
        results,
        subject,
        peers,
        config.FULL,
        3,
        dt.datetime(2026, 11, 27, 13, 0),
        ("1.00 1.00 1.00", "1.00 1.00 1.00"),
        "python -m bench",
    )
    assert text.startswith("# Strom vs. Tansu and Kafka - 2026-11-27 13:00")
    assert "| Strom/Tansu | Strom/Kafka | Target |" in text
    assert "A target that compares with a peer names it" in text
    title = chart.title_from_report(text)
    assert title.startswith(
        "Strom vs. Tansu and Kafka - 2026-11-27 13:00 (tansu 0.6.0, kafka 4.4.0)"
    )
    live = chart.from_results(
        run._table(scenarios, config.FULL), results.runs, "Strom", ["Tansu", "Kafka"], title
    )
    saved = chart.from_markdown(text)
    assert saved == live and saved.peers == ("Tansu", "Kafka")
    first = saved.entries[0]
    assert first.ratio_to(0) == 201 / 51 and first.ratio_to(1) == 201 / 101
    bars = ratio_bars(saved.entries, saved.peers)
    assert {b.label.rsplit(" / ", 1)[1] for b in bars} == {"Tansu", "Kafka"}
    assert len(broker_groups(saved.entries, "MB/s")[0].peers) == 2


def test_draw_with_two_peers(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    scenarios, results = _two_peer_run()
    data = chart.from_results(
        run._table(scenarios, config.FULL), results.runs, "Strom", ["Tansu", "Kafka"], "t"
    )
    chart.draw(data, tmp_path / "c.svg")
    assert b"Kafka" in (tmp_path / "c.svg").read_bytes()


def _kafka_like() -> BrokerSpec:
    """A Kafka-labelled spec without the jars (kafka_spec would fetch them)."""
    return BrokerSpec(
        label="Kafka",
        kind="kafka",
        command=lambda port, data: ["java", "kafka.Kafka", str(data / "server.properties")],
        persistent=True,
        version="kafka 4.4.0",
        notes="disk storage, JVM heap 1 GiB",
        ready_marker=None,
    )


def test_peer_names() -> None:
    assert run.peer_names(None) == ["tansu", "kafka"]
    assert run.peer_names(["kafka,tansu"]) == ["tansu", "kafka"]
    assert run.peer_names(["kafka", "kafka"]) == ["kafka"]
    assert run.peer_names(["strom"]) == ["strom"]
    for bad in (["strom,tansu"], ["redpanda"], [","]):
        with pytest.raises(SystemExit):
            run.peer_names(bad)
