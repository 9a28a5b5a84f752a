"""Which test files belong to which open issue, and the time each issue may add to `make test`.

An issue's budget ("this issue's tests add at most N s to `make test`") is checked by
`make issue-time ISSUE=N` (tools/issue_time.py): it runs the issue's files alone, the way
`make test` runs every file (the same workers, `--dist loadfile`, the same marks), and prints the
wall time, the CPU they and their brokers, JVMs and tools used, and that CPU as a share of a
full run's (from a STROM_TEST_CPU report of that run, if given).

A file counts toward the issue that made it; a file an issue only touched does not. Paths are
relative to the repository root; a directory means every test file below it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class IssueTests:
    budget_s: float
    paths: tuple[str, ...]


ISSUE_TESTS: dict[int, IssueTests] = {
    # safety: coordinator runtime, Jepsen-style checks, metadata damage, failover off the loop
    28: IssueTests(120, (
        "tests/integration/cluster/test_jepsen.py",
        "tests/integration/cluster/test_jepsen_clients.py",
        "tests/integration/cluster/test_coordinator_commits.py",
        "tests/integration/cluster/test_leadership_restarts.py",
        "tests/integration/cluster/test_metadata_damage.py",
        "tests/integration/test_metadata_damage.py",
        "tests/integration/test_decoder_limits.py",
        "tests/integration/share/test_share_transactions_and_locks.py",
        "tests/integration/share/test_share_redelivery_restart.py",
        "tests/unit/jepsen",
        "tests/unit/coordinator/runtime",
        "tests/unit/protocol/test_decoder_limits.py",
        "tests/unit/storage/test_epoch_writer.py",
        "tests/unit/storage/test_cleaner_threads.py",
        "tests/unit/cluster/replication/test_leadership_batches.py",
        "tests/unit/cluster/replication/test_maximal_isr.py",
        "tests/unit/cluster/test_local_controller.py",
        "tests/unit/cluster/test_metadata_damage.py",
        "tests/unit/cluster/zk/test_inherited_leadership.py",
        "tests/unit/broker/test_partition_strays.py",
        "tests/unit/broker/test_commit_gate.py",
        "tests/unit/broker/test_marker_writer.py",
    )),
    # KRaft: the quorum, its tools, storage formatting, the move from ZooKeeper, `strom cluster`
    30: IssueTests(150, (
        "tests/integration/cluster/test_kraft_cluster.py",
        "tests/integration/cluster/test_kraft_combined.py",
        "tests/integration/cluster/test_kraft_quorum.py",
        "tests/integration/cluster/test_kraft_cli_and_bad_input.py",
        "tests/integration/cluster/test_fuzz_controller_listener.py",
        "tests/integration/cluster/test_dynamic_quorum.py",
        "tests/integration/cluster/test_storage_format_quorum.py",
        "tests/integration/cluster/test_zookeeper_migration.py",
        "tests/integration/cluster/test_zookeeper_rolling_migration.py",
        "tests/integration/kafka_tools/test_features.py",
        "tests/integration/test_cluster_cli.py",
        "tests/unit/raft",
        "tests/unit/controller",
        "tests/unit/cli/test_storage_format.py",
        "tests/unit/cli/test_quorum.py",
        "tests/unit/cli/test_cluster_cli.py",
    )),
    # HTTP: REST Proxy v2/v3, share groups and SSE over HTTP, the OpenAPI fuzzer
    32: IssueTests(60, (
        "tests/integration/rest",
        "tests/unit/rest",
        "tests/unit/http",
        "tests/unit/bench/test_http_scenario.py",
    )),
    # Iceberg: topics as tables, the Spark read of them; the Spark source's native reader
    33: IssueTests(120, (
        "tests/integration/lake",
        "tests/integration/spark/test_iceberg_spark_read.py",
        "tests/integration/spark/test_spark_fetcher.py",
        "tests/integration/cluster/test_spark_fetcher_failover.py",
        "tests/unit/lake",
        "tests/unit/record/test_columns.py",
        "tests/unit/spark/test_iceberg_load_parts.py",
        "tests/unit/bench/test_iceberg_scenario.py",
    )),
}


def _in_paths(path: str, paths: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in paths)


def cpu_share(report: Path, paths: tuple[str, ...]) -> tuple[float, float, float]:
    """(the issue's CPU, the run's CPU, the issue's files' wall times summed) from a
    STROM_TEST_CPU file."""
    mine = total = wall = 0.0
    for line in report.read_text().splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        cpu, file_wall, path = float(parts[0]), float(parts[1]), parts[2]
        total += cpu
        if _in_paths(path, paths):
            mine += cpu
            wall += file_wall
    return mine, total, wall
