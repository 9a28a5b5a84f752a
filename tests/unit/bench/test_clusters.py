"""The cluster scenario's pure parts: node configs, the quorum strings, CPU sums, rows (no broker)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

# bench/ lives at the repository root, outside the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench import clusters, config
from bench.brokers import strom_spec
from bench.kafka_peer import SHIPPED_DEFAULTS
from bench.procstat import CpuSample
from bench.scenarios import ALL
from bench.scenarios.base import Context
from bench.scenarios.cluster import NO_REPLICATION, NO_ZOOKEEPER, ClusterScenario, spent
from bench.scenarios.latency import check_paced, latency_metrics


def _parse(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


# -- Strom ----------------------------------------------------------------------------------------


def test_zoo_cfg_serves_ruok_on_the_given_port() -> None:
    cfg = _parse(clusters.zoo_cfg(Path("/z/data"), 2345))
    assert cfg["clientPort"] == "2345"
    assert cfg["clientPortAddress"] == "127.0.0.1"
    assert cfg["dataDir"] == "/z/data"
    assert cfg["4lw.commands.whitelist"] == "ruok"
    assert cfg["admin.enableServer"] == "false"


def test_strom_node_overrides() -> None:
    assert clusters.strom_node_overrides(2, 2181) == [
        "broker.id=2",
        "zookeeper.connect=127.0.0.1:2181/strom",
        "default.replication.factor=3",
        "min.insync.replicas=2",
    ]


def test_strom_node_command_keeps_the_runs_command_line() -> None:
    spec = strom_spec("strom", config="s.properties", overrides=["num.io.threads=4"])
    argv = clusters.strom_node_command(spec, 3, 2181)(9092, Path("/d"))
    assert argv[:4] == ["strom", "broker", "--config", "s.properties"]
    overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "--override"]
    assert "listeners=PLAINTEXT://127.0.0.1:9092" in overrides
    assert "log.dirs=/d/logs" in overrides
    assert "num.io.threads=4" in overrides
    assert overrides[-4:] == clusters.strom_node_overrides(3, 2181)


# -- Kafka ----------------------------------------------------------------------------------------


def test_quorum_strings() -> None:
    assert clusters.quorum_bootstrap([9101, 9102, 9103]) == (
        "127.0.0.1:9101,127.0.0.1:9102,127.0.0.1:9103"
    )
    assert clusters.initial_controllers([9101, 9102], ["AAAA", "BBBB"]) == (
        "1@127.0.0.1:9101:AAAA,2@127.0.0.1:9102:BBBB"
    )
    with pytest.raises(ValueError):
        clusters.initial_controllers([9101, 9102], ["AAAA"])


def test_directory_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    ids = iter(["-starts-with-dash-xxxx", "fine_id_0123456789abcd"])
    monkeypatch.setattr(clusters, "cluster_id", lambda: next(ids))
    assert clusters.directory_id() == "fine_id_0123456789abcd"


def test_real_directory_ids_differ() -> None:
    a, b = clusters.directory_id(), clusters.directory_id()
    assert a != b and len(a) == 22 and not a.startswith("-")


def test_kafka_node_settings() -> None:
    controllers = [9101, 9102, 9103]
    props = clusters.kafka_node_settings(2, 9092, controllers, Path("/d/logs"))
    per_node = {
        "node.id": "2",
        "controller.quorum.bootstrap.servers": "127.0.0.1:9101,127.0.0.1:9102,127.0.0.1:9103",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9102",
        "advertised.listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9102",
        "log.dirs": "/d/logs",
    }
    cluster_wide = {
        "offsets.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        "share.coordinator.state.topic.replication.factor": "3",
        "share.coordinator.state.topic.min.isr": "2",
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
    }
    assert props == {**SHIPPED_DEFAULTS, **cluster_wide, **per_node}
    assert props["process.roles"] == "broker,controller"
    assert "controller.quorum.voters" not in props  # a dynamic quorum: --initial-controllers
    assert _parse(clusters.properties_text(props)) == props


def test_kafka_format_command_names_every_voter() -> None:
    cmd = clusters.kafka_format_command(
        "java", Path("/libs"), Path("/d/server.properties"), "-cid", "1@h:1:A,2@h:2:B"
    )
    assert cmd[cmd.index("-cp") + 1] == "/libs/*"
    assert cmd[cmd.index("kafka.tools.StorageTool") + 1 :] == [
        "format",
        "--cluster-id=-cid",
        "--initial-controllers=1@h:1:A,2@h:2:B",
        "-c",
        "/d/server.properties",
    ]
    assert "--standalone" not in cmd


# -- measurements ---------------------------------------------------------------------------------


def test_cpu_sum_adds_each_brokers_delta() -> None:
    before = [CpuSample(1.0, 1.0), CpuSample(2.0, 2.0), CpuSample(0.0, None)]
    after = [CpuSample(1.5, 1.523), CpuSample(2.0, 2.004), CpuSample(0.3, None)]
    # precise schedstat for the first two, ticks for the third (no schedstat)
    assert clusters.cpu_sum(before, after) == pytest.approx(0.523 + 0.004 + 0.3)
    with pytest.raises(ValueError):
        clusters.cpu_sum(before, after[:2])


def test_spent_separates_zookeeper() -> None:
    brokers0 = [CpuSample(0.0, 0.0)] * 3
    brokers1 = [CpuSample(0.0, 0.5)] * 3
    assert spent((brokers0, CpuSample(1.0, 1.0)), (brokers1, CpuSample(1.0, 1.25))) == (
        pytest.approx(1.5),
        pytest.approx(0.25),
    )
    assert spent((brokers0, None), (brokers1, None)) == (pytest.approx(1.5), 0.0)


def _partition(leader: int = 1, replicas=(1, 2, 3), isrs=(1, 2, 3), error=None):
    return SimpleNamespace(leader=leader, replicas=list(replicas), isrs=list(isrs), error=error)


def _metadata(**partitions) -> SimpleNamespace:
    topic = SimpleNamespace(error=None, partitions=dict(enumerate(partitions.values())))
    return SimpleNamespace(topics={"t": topic})


def test_all_replicas_in_sync() -> None:
    assert clusters.all_replicas_in_sync(_metadata(a=_partition(), b=_partition()), "t", 2, 3)
    assert not clusters.all_replicas_in_sync(_metadata(a=_partition()), "t", 2, 3)
    assert not clusters.all_replicas_in_sync(_metadata(a=_partition(isrs=(1, 2))), "t", 1, 3)
    assert not clusters.all_replicas_in_sync(_metadata(a=_partition(leader=-1)), "t", 1, 3)
    assert not clusters.all_replicas_in_sync(_metadata(a=_partition()), "other", 1, 3)


def test_paced_run_checks_and_percentiles() -> None:
    sent = {"failed": 0, "first_error": None}
    got = {"records": 10, "expected": 10, "latencies_us": {"p50": 1500, "p99": 4000,
                                                          "p99.9": 9000, "max": 12000}}  # fmt: skip
    assert check_paced(sent, got) is None
    assert check_paced({**sent, "failed": 2, "first_error": "boom"}, got) == (
        "2 records not delivered (boom)"
    )
    assert check_paced(sent, {**got, "records": 9}) == "consumed 9 of 10 records"
    assert latency_metrics(got) == {"p50_ms": 1.5, "p99_ms": 4.0, "p999_ms": 9.0, "max_ms": 12.0}


# -- the scenario ---------------------------------------------------------------------------------


def test_registered_before_the_huge_broker() -> None:
    names = [s.name for s in ALL]
    assert names.index("cluster-3") == names.index("share-consume") + 1


def test_sizes() -> None:
    assert config.FULL.cluster_records == 150_000
    assert config.QUICK.cluster_records == 30_000


def test_rows_carry_issue_21s_goals_against_kafka() -> None:
    rows = ClusterScenario().rows(config.FULL)
    keys = [m.key for m in rows.metrics]
    assert keys[:4] == ["produce_mbs", "produce_rpcpu", "consume_mbs", "consume_rpcpu"]
    assert {"p50_ms", "p99_ms", "p999_ms", "rss_mb", "zk_cpu_s"} <= set(keys)
    goals = {m.key: [(t.kind, t.value, t.peer) for t in m.targets] for m in rows.metrics if m.target}
    assert goals == {"produce_mbs": [("ratio_min", 1.0, "Kafka")],
                     "consume_mbs": [("ratio_min", 1.0, "Kafka")],
                     "p99_ms": [("ratio_max", 1.0, "Kafka")],
                     "rss_mb": [("ratio_max", 0.25, "Kafka")]}
    assert "RF=3" in rows.title and "min.insync.replicas=2" in rows.title
    assert "150,000 records" in rows.title


def test_tansu_is_na_on_every_row_and_starts_nothing() -> None:
    spec = SimpleNamespace(kind="tansu", label="Tansu")
    with tempfile.TemporaryDirectory() as d:
        ctx = Context(sizes=config.QUICK, workdir=Path(d), log=lambda _m: None)
        out = ClusterScenario().run(spec, ctx)  # type: ignore[arg-type]
        assert list(Path(d).iterdir()) == []
    assert out.failed is None and not out.metrics
    keys = {m.key for m in ClusterScenario().rows(config.QUICK).metrics}
    assert out.na == dict.fromkeys(keys, NO_REPLICATION)


def test_no_zookeeper_note_names_kafkas_controllers() -> None:
    assert "KRaft" in NO_ZOOKEEPER and "broker CPU" in NO_ZOOKEEPER
