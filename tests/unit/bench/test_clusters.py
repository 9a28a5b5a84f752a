"""The cluster scenarios' pure parts: node configs, the quorum strings, DescribeQuorum, CPU sums,
rows (no broker)."""

from __future__ import annotations

import socket
import struct
import sys
import tempfile
import threading
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
from bench.scenarios.cluster import (
    KAFKA_NO_ZOOKEEPER,
    NO_REPLICATION,
    ClusterScenario,
    ClusterScenarioZooKeeper,
    spent,
)
from bench.scenarios.cluster_ops import (
    ClusterFailover,
    ClusterPartitions,
    in_sync_partitions,
    led_partitions,
    topic_sizes,
    wait_until,
)
from bench.scenarios.latency import check_paced, latency_metrics


def _parse(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


# -- Strom on ZooKeeper (cluster-3-zk) ------------------------------------------------------------


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


# -- Strom as KRaft nodes -------------------------------------------------------------------------


def test_static_voters() -> None:
    assert clusters.static_voters([9101, 9102, 9103]) == (
        "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103"
    )


def test_strom_kraft_settings() -> None:
    props = clusters.strom_kraft_settings(2, 9092, [9101, 9102, 9103])
    assert props == {
        "process.roles": "broker,controller",
        "node.id": "2",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9102",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.quorum.voters": "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103",
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
    }
    assert not any(k.startswith(("zookeeper.", "broker.id")) for k in props)


def test_strom_kraft_command_ends_with_the_nodes_settings() -> None:
    spec = strom_spec("strom", config="s.properties", overrides=["num.io.threads=4"])
    argv = clusters.strom_kraft_command(spec, 1, [9101, 9102, 9103])(9092, Path("/d"))
    assert argv[:4] == ["strom", "broker", "--config", "s.properties"]
    overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "--override"]
    assert "num.io.threads=4" in overrides and "log.dirs=/d/logs" in overrides
    assert overrides[-8:] == clusters.strom_kraft_overrides(1, 9092, [9101, 9102, 9103])
    # the node's listeners come after the run's, so they win (a later --override of a key does)
    listeners = [o for o in overrides if o.startswith("listeners=")]
    assert listeners[-1] == "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9101"


def test_format_properties_holds_the_config_file_then_every_override() -> None:
    spec = strom_spec("strom", config="s.properties", overrides=["num.io.threads=4"])
    argv = clusters.strom_kraft_command(spec, 3, [9101, 9102, 9103])(9094, Path("/d"))
    text = clusters.format_properties(argv, read=lambda p: f"# {p}\nlog.retention.hours=1")
    lines = text.splitlines()
    assert lines[:2] == ["# s.properties", "log.retention.hours=1"]
    assert lines[2:] == [argv[i + 1] for i, a in enumerate(argv) if a == "--override"]
    settings = _parse("\n".join(lines[1:]))  # a later line of a key wins, as in the broker
    assert settings["node.id"] == "3" and settings["log.dirs"] == "/d/logs"
    assert settings["listeners"] == "PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9103"
    assert clusters.format_properties(["strom", "broker"]) == ""


def test_strom_format_command() -> None:
    assert clusters.strom_format_command("/v/strom", Path("/d/f.properties"), "-cid") == [
        "/v/strom", "storage", "format", "-c", "/d/f.properties", "--cluster-id=-cid"
    ]


def test_no_zookeeper_cluster_of_kafka(tmp_path: Path) -> None:
    spec = SimpleNamespace(kind="kafka", label="Kafka")
    with pytest.raises(clusters.BrokerError, match="no ZooKeeper cluster of kafka"):
        clusters.start(spec, tmp_path, 1.0, zookeeper=True)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


# -- DescribeQuorum -------------------------------------------------------------------------------


def _quorum_response(correlation: int, error: int = 0, p_error: int = 0, leader: int = 2,
                     epoch: int = 5, topics: int = 1) -> bytes:
    """A DescribeQuorum v0 response body as a controller sends it (after the size)."""
    name = b"__cluster_metadata"
    out = struct.pack(">i", correlation) + b"\x00" + struct.pack(">h", error)
    out += bytes([topics + 1])
    if topics:
        out += bytes([len(name) + 1]) + name + b"\x02"
        out += struct.pack(">ihiiq", 0, p_error, leader, epoch, 42)
        out += b"\x01\x01\x00\x00"  # no voters, no observers, tags
    return out


def test_describe_quorum_request_bytes() -> None:
    req = clusters.describe_quorum_request(7)
    (size,) = struct.unpack(">i", req[:4])
    assert size == len(req) - 4
    assert struct.unpack(">hhih", req[4:14]) == (55, 0, 7, len(b"strom-bench"))
    body = req[14 + len(b"strom-bench"):]
    name = b"__cluster_metadata"
    assert body == b"\x00" + b"\x02" + bytes([len(name) + 1]) + name + b"\x02" + \
        struct.pack(">i", 0) + b"\x00\x00\x00"


def test_parse_describe_quorum() -> None:
    parse = clusters.parse_describe_quorum
    assert parse(_quorum_response(7), 7) == clusters.QuorumAnswer(0, 2, 5)
    assert parse(_quorum_response(7, p_error=6, leader=-1), 7).error == 6
    assert parse(_quorum_response(7, error=35, topics=0), 7).error == 35
    assert parse(_quorum_response(7, topics=0), 7) == clusters.QuorumAnswer(-1, -1, -1)
    with pytest.raises(ValueError, match="correlation"):
        parse(_quorum_response(8), 7)
    with pytest.raises(ValueError):
        parse(_quorum_response(7)[:12], 7)


def test_uvarints_round_trip() -> None:
    for n in (0, 1, 127, 128, 300, 16384, 2**31):
        enc = clusters._uvarint(n)
        assert clusters._read_uvarint(enc + b"\xff", 0) == (n, len(enc))


def test_leader_from_takes_the_answer_without_error() -> None:
    follower = clusters.QuorumAnswer(6, -1, -1)
    leader = clusters.QuorumAnswer(0, 3, 9)
    assert clusters.leader_from([None, follower, leader]) == (3, 9)
    assert clusters.leader_from([None, follower]) is None
    assert clusters.leader_from([clusters.QuorumAnswer(0, -1, 4)]) is None


def test_describe_quorum_over_a_socket() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                head = conn.recv(4)
                (size,) = struct.unpack(">i", head)
                request = b""
                while len(request) < size:
                    request += conn.recv(size - len(request))
                (correlation,) = struct.unpack(">i", request[4:8])
                body = _quorum_response(correlation, leader=1, epoch=3)
                conn.sendall(struct.pack(">i", len(body)) + body)

        t = threading.Thread(target=answer, daemon=True)
        t.start()
        assert clusters.describe_quorum(port, 5.0) == clusters.QuorumAnswer(0, 1, 3)
        t.join(5)
    assert clusters.describe_quorum(port, 0.5) is None  # nobody listens any more


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


def test_registered_after_the_share_groups() -> None:
    names = [s.name for s in ALL]
    at = names.index("share-consume") + 1
    assert names[at:at + 4] == ["cluster-3", "cluster-3-zk", "cluster-failover",
                                "cluster-10k-partitions"]


def test_sizes() -> None:
    assert config.FULL.cluster_records == 150_000
    assert config.QUICK.cluster_records == 30_000
    assert (config.FULL.failover_repeats, config.QUICK.failover_repeats) == (3, 1)
    for sizes in (config.FULL, config.QUICK):
        assert (sizes.cluster_partitions, sizes.cluster_partitions_rf) == (10_000, 3)


def test_rows_carry_issue_21s_goals_against_kafka() -> None:
    rows = ClusterScenario().rows(config.FULL)
    keys = [m.key for m in rows.metrics]
    assert keys[:4] == ["produce_mbs", "produce_rpcpu", "consume_mbs", "consume_rpcpu"]
    assert {"p50_ms", "p99_ms", "p999_ms", "rss_mb"} <= set(keys)
    goals = {m.key: [(t.kind, t.value, t.peer) for t in m.targets] for m in rows.metrics if m.target}
    assert goals == {"produce_mbs": [("ratio_min", 1.0, "Kafka")],
                     "consume_mbs": [("ratio_min", 1.0, "Kafka")],
                     "p99_ms": [("ratio_max", 1.0, "Kafka")],
                     "rss_mb": [("ratio_max", 0.25, "Kafka")]}
    assert "RF=3" in rows.title and "min.insync.replicas=2" in rows.title
    assert "150,000 records" in rows.title and "KRaft" in rows.title
    assert "zk_cpu_s" not in keys


def test_zookeeper_variant_has_the_rows_and_no_goals() -> None:
    rows = ClusterScenarioZooKeeper().rows(config.FULL)
    keys = [m.key for m in rows.metrics]
    assert keys == [m.key for m in ClusterScenario().rows(config.FULL).metrics] + ["zk_cpu_s"]
    assert not any(m.targets for m in rows.metrics)
    assert rows.name == "cluster-3-zk" and "ZooKeeper" in rows.title


def test_zookeeper_variant_skips_kafka_and_starts_nothing() -> None:
    spec = SimpleNamespace(kind="kafka", label="Kafka")
    with tempfile.TemporaryDirectory() as d:
        ctx = Context(sizes=config.QUICK, workdir=Path(d), log=lambda _m: None)
        out = ClusterScenarioZooKeeper().run(spec, ctx)  # type: ignore[arg-type]
        assert list(Path(d).iterdir()) == []
    keys = {m.key for m in ClusterScenarioZooKeeper().rows(config.QUICK).metrics}
    assert out.failed is None and out.na == dict.fromkeys(keys, KAFKA_NO_ZOOKEEPER)


@pytest.mark.parametrize("scenario", [ClusterScenario(), ClusterScenarioZooKeeper(),
                                      ClusterFailover(), ClusterPartitions()],
                         ids=lambda s: s.name)
def test_tansu_is_na_on_every_row_and_starts_nothing(scenario) -> None:
    spec = SimpleNamespace(kind="tansu", label="Tansu")
    with tempfile.TemporaryDirectory() as d:
        ctx = Context(sizes=config.QUICK, workdir=Path(d), log=lambda _m: None)
        out = scenario.run(spec, ctx)  # type: ignore[arg-type]
        assert list(Path(d).iterdir()) == []
    assert out.failed is None and not out.metrics
    keys = {m.key for m in scenario.rows(config.QUICK).metrics}
    assert out.na == dict.fromkeys(keys, NO_REPLICATION)


# -- cluster-failover and cluster-10k-partitions --------------------------------------------------


def _goals(rows) -> dict[str, list[tuple[str, float, str | None]]]:
    return {m.key: [(t.kind, t.value, t.peer) for t in m.targets] for m in rows.metrics if m.target}


def test_failover_rows_judge_the_failover_time_against_kafka() -> None:
    rows = ClusterFailover().rows(config.FULL)
    assert [m.key for m in rows.metrics] == ["failover_s", "leader_s", "rejoin_s",
                                             "load_worst_ms", "load_failed"]
    assert _goals(rows) == {"failover_s": [("ratio_max", 1.0, "Kafka")]}
    assert "median of 3 kills" in rows.title and "acks=all" in rows.title
    assert "median of 1 kill;" not in rows.title
    assert ClusterFailover().rows(config.QUICK).title.endswith("median of 1 kill")


def test_partitions_rows_judge_both_times_against_kafka() -> None:
    rows = ClusterPartitions().rows(config.FULL)
    assert [m.key for m in rows.metrics] == ["create_s", "restart_s", "registered_s", "rss_mb"]
    assert _goals(rows) == {"create_s": [("ratio_max", 1.0, "Kafka")],
                            "restart_s": [("ratio_max", 1.0, "Kafka")]}
    assert "10,000 partitions" in rows.title and "10 topics of up to 1,000" in rows.title
    assert "RF=3" in rows.title


def test_topic_sizes() -> None:
    assert topic_sizes(10_000) == [1_000] * 10
    assert topic_sizes(2_500) == [1_000, 1_000, 500]
    assert topic_sizes(10) == [10]
    with pytest.raises(ValueError):
        topic_sizes(0)


def _md(**topics) -> SimpleNamespace:
    return SimpleNamespace(topics={
        name: SimpleNamespace(error=None, partitions=dict(enumerate(parts)))
        for name, parts in topics.items()
    })


def test_led_and_in_sync_partitions() -> None:
    md = _md(a=[_partition(), _partition(leader=-1), _partition(isrs=(1,))],
             b=[_partition(error="LEADER_NOT_AVAILABLE")], other=[_partition()])
    assert led_partitions(md, {"a": 3, "b": 1, "missing": 5}) == 2
    assert in_sync_partitions(md, {"a": 3, "b": 1}, 3) == 1
    assert in_sync_partitions(md, {"a": 3}, 1) == 1
    md.topics["a"].error = "UNKNOWN_TOPIC"
    assert led_partitions(md, {"a": 3}) == 0


def test_wait_until_returns_the_first_truthy_value_and_times_out() -> None:
    seen = iter([None, RuntimeError("not yet"), 0, (2, 7)])

    def check():
        got = next(seen)
        if isinstance(got, Exception):
            raise got
        return got

    assert wait_until(check, 5.0, "x", pause=0) == (2, 7)
    with pytest.raises(TimeoutError, match="not a leader after 0 s"):
        wait_until(lambda: None, 0.0, "a leader", pause=0)
