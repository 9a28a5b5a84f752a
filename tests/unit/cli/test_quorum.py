"""`strom quorum describe` without a quorum: reading DescribeQuorum answers, the status and
replication tables, and one-line errors (the wire is tested against real controllers in
tests/integration/cluster/test_kraft_cli_and_bad_input.py)."""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from strom.cli.common import CliError
from strom.cli.main import app
from strom.cli.quorum import (
    REPLICATION_COLUMNS,
    QuorumView,
    parse_servers,
    replication_rows,
    replication_table,
    status_rows,
    status_table,
    view_from_response,
)

runner = CliRunner()
DIR = uuid.UUID(int=1)


def state(node_id: int, end: int, fetch: int = 1000, caught_up: int = 1000,
          directory: uuid.UUID | None = None) -> dict[str, Any]:
    return {"replica_id": node_id, "replica_directory_id": directory or uuid.UUID(int=0),
            "log_end_offset": end, "last_fetch_timestamp": fetch,
            "last_caught_up_timestamp": caught_up}


def response(**partition: Any) -> dict[str, Any]:
    p = {"partition_index": 0, "error_code": 0, "error_message": None, "leader_id": 2,
         "leader_epoch": 7, "high_watermark": 40,
         "current_voters": [state(3, 38, caught_up=900), state(2, 42, directory=DIR),
                            state(1, 42)],
         "observers": [state(9, 30, caught_up=-1)]}
    p.update(partition)
    return {"error_code": 0, "error_message": None,
            "topics": [{"topic_name": "__cluster_metadata", "partitions": [p]}],
            "nodes": [{"node_id": i, "listeners": [{"name": "CONTROLLER", "host": "h",
                                                    "port": 9090 + i}]} for i in (1, 2, 3)]}


def view(**partition: Any) -> QuorumView:
    return view_from_response(response(**partition), "S3RyYWZ0UXVvcnVtVGVzdA")


def rendered(table: Any) -> str:
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(table)
    return buf.getvalue()


def test_status_rows_follow_kafka_metadata_quorum() -> None:
    rows = dict(status_rows(view()))
    assert list(rows) == ["ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark",
                          "MaxFollowerLag", "MaxFollowerLagTimeMs", "CurrentVoters",
                          "CurrentObservers"]
    assert rows["ClusterId"] == "S3RyYWZ0UXVvcnVtVGVzdA"
    assert (rows["LeaderId"], rows["LeaderEpoch"], rows["HighWatermark"]) == ("2", "7", "40")
    assert rows["MaxFollowerLag"] == "4"  # voter 3: 42 - 38 (observers do not count)
    assert rows["MaxFollowerLagTimeMs"] == "100"  # voter 3 caught up 100 ms before the leader
    assert rows["CurrentVoters"] == ("1 (CONTROLLER://h:9091), 2 (CONTROLLER://h:9092), "
                                     "3 (CONTROLLER://h:9093)")
    assert rows["CurrentObservers"] == "9"


def test_status_without_endpoints_or_observers() -> None:
    resp = response(observers=[])
    resp["nodes"] = []
    rows = dict(status_rows(view_from_response(resp, "", {1: ["h:1"]})))
    assert rows["ClusterId"] == "-"
    assert rows["CurrentVoters"] == "1 (h:1), 2, 3"
    assert rows["CurrentObservers"] == "-"
    assert rows["MaxFollowerLag"] == "4"
    caught_up = [state(1, 42), state(2, 42), state(3, 42)]
    assert dict(status_rows(view(current_voters=caught_up)))["MaxFollowerLagTimeMs"] == "0"
    unknown = [state(1, 42), state(2, 42), state(3, 40, caught_up=-1)]
    assert dict(status_rows(view(current_voters=unknown)))["MaxFollowerLagTimeMs"] == "-1"


def test_replication_rows_leader_first_then_followers_then_observers() -> None:
    rows = replication_rows(view())
    assert [(r[0], r[6]) for r in rows] == [("2", "Leader"), ("1", "Follower"),
                                            ("3", "Follower"), ("9", "Observer")]
    leader, _, lagging, observer = rows
    assert leader[1] == "AAAAAAAAAAAAAAAAAAAAAQ"  # Kafka's textual directory id
    assert (leader[2], leader[3]) == ("42", "0")
    assert (lagging[2], lagging[3], lagging[5]) == ("38", "4", "900")
    assert (observer[3], observer[5]) == ("12", "-")


def test_replication_rows_human_readable_times() -> None:
    rows = replication_rows(view(), now_ms=1500)
    assert rows[0][4:6] == ("500 ms ago", "500 ms ago")
    assert rows[3][5] == "-"


def test_tables_render_every_row() -> None:
    text = rendered(replication_table(view()))
    header, *lines = [line.split() for line in text.splitlines() if line.strip()]
    assert header == list(REPLICATION_COLUMNS)
    assert [line[0] for line in lines] == ["2", "1", "3", "9"]
    status = rendered(status_table(view()))
    assert "LeaderEpoch:" in status and "MaxFollowerLag:" in status


def test_errors_become_one_line() -> None:
    with pytest.raises(CliError, match="NOT_LEADER_OR_FOLLOWER"):
        view(error_code=6)
    resp = response()
    resp["error_code"], resp["error_message"] = 42, "bad"
    with pytest.raises(CliError, match="INVALID_REQUEST: bad"):
        view_from_response(resp, "x")


@pytest.mark.parametrize("bad", ["nohost", "h:port", ",", ":9093"])
def test_bootstrap_controller_syntax(bad: str) -> None:
    with pytest.raises(CliError):
        parse_servers(bad)
    assert parse_servers("a:1, [::1]:2") == [("a", 1), ("::1", 2)]


def test_cli_usage_errors_are_one_line() -> None:
    result = runner.invoke(app, ["quorum", "describe", "--bootstrap-controller", "h:1",
                                 "--status", "--replication"])
    assert result.exit_code == 2
    assert "not both" in result.output
    result = runner.invoke(app, ["quorum", "describe", "--bootstrap-controller", "bad"])
    assert result.exit_code == 2
    assert "expected host:port" in result.output
