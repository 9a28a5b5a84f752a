"""Three controllers formatted with ``strom storage format`` (not a hand-written meta.properties)
start and elect a leader; an unformatted one refuses to start with one line (issue 30, item 3).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ..broker import HOST, BrokerProcess, free_port
from .test_kraft_quorum import CLUSTER_ID, _stop_together, leader_view, poll

STROM = Path(sys.executable).with_name("strom")


def _formatted_controllers(factory: pytest.TempPathFactory) -> list[BrokerProcess]:
    ports = [free_port() for _ in range(3)]
    voters = ",".join(f"{i}@{HOST}:{port}" for i, port in enumerate(ports, 1))
    nodes = []
    for i, port in enumerate(ports, 1):
        node = BrokerProcess(factory.mktemp(f"fmt-c{i}"), port=port, name=f"fmt-c{i}")
        node.overrides = {
            "process.roles": "controller", "node.id": str(i),
            "controller.quorum.voters": voters, "controller.listener.names": "CONTROLLER",
            "listeners": f"CONTROLLER://{HOST}:{port}", "metrics.listener": "",
        }
        config = node.base_dir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in
                                  {**node.overrides, "log.dirs": node.data_dir}.items()))
        nodes.append(node)
    return nodes


def test_formatted_controllers_elect_a_leader(tmp_path_factory: pytest.TempPathFactory) -> None:
    nodes = _formatted_controllers(tmp_path_factory)
    # Unformatted: a controller refuses to start, naming the missing meta.properties.
    first = nodes[0]
    refused = subprocess.run(first.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=60)
    assert refused.returncode != 0
    assert "no meta.properties" in refused.stdout, refused.stdout
    for node in nodes:
        res = subprocess.run([str(STROM), "storage", "format", "-c",
                              str(node.base_dir / "server.properties"), "-t", CLUSTER_ID],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert "Formatting metadata directory" in res.stdout
        assert (node.data_dir / "__cluster_metadata-0" /
                "00000000000000000000-0000000000.checkpoint").is_file()
    try:
        for node in nodes:
            node.start(wait=False)
        for node in nodes:
            node.wait_ready()
        view = poll(lambda: leader_view(nodes), 15, "a leader")
        assert view["leader_id"] in (1, 2, 3) and view["leader_epoch"] >= 1
        assert sorted(v["replica_id"] for v in view["current_voters"]) == [1, 2, 3]
    finally:
        _stop_together(nodes)
