"""The Kafka peer's pure parts: its server.properties, cluster id and command lines."""

from __future__ import annotations

import base64
import sys
from pathlib import Path

# bench/ lives at the repository root, outside the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench import kafka_peer as kafka


def _parse(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_server_properties_are_the_shipped_ones_but_listeners_and_log_dir() -> None:
    props = _parse(kafka.server_properties(9092, 9093, Path("/d/logs")))
    per_run = {
        "node.id": "1",
        "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "advertised.listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "log.dirs": "/d/logs",
    }
    assert props == {**kafka.SHIPPED_DEFAULTS, **per_run}
    assert props["process.roles"] == "broker,controller"
    assert props["controller.listener.names"] == "CONTROLLER"
    # One node: the internal topics can only have one replica.
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"


def test_cluster_id_is_a_base64_uuid() -> None:
    cid = kafka.cluster_id()
    assert len(cid) == 22 and "=" not in cid
    assert len(base64.urlsafe_b64decode(cid + "==")) == 16
    assert kafka.cluster_id() != cid


def test_commands_use_the_scripts_jvm_flags() -> None:
    cmd = kafka.broker_command("java", Path("/libs"), Path("/d/server.properties"))
    assert cmd[0] == "java" and cmd[-2:] == ["kafka.Kafka", "/d/server.properties"]
    for flag in ("-Xmx1G", "-Xms1G", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                 "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
                 "-Djava.awt.headless=true"):  # fmt: skip
        assert flag in cmd
    assert cmd[cmd.index("-cp") + 1] == "/libs/*"
    fmt = kafka.format_command("java", Path("/libs"), Path("/d/server.properties"), "abc")
    assert fmt[fmt.index("kafka.tools.StorageTool") + 1 :] == [
        "format", "--standalone", "--cluster-id=abc", "-c", "/d/server.properties"
    ]  # fmt: skip
