"""`strom console --command-config`: the console reaches a SASL listener with the same client
properties file as the other `strom` commands (Kafka's Java property names)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from ..broker import HOST, free_port
from .console_process import get

pytestmark = pytest.mark.timeout(90)

JAAS_SERVER = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
               'user_alice="alice-secret";')


def client_properties(path: Path, password: str) -> Path:
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
                    f'required username="alice" password="{password}";\n')
    return path


def test_console_over_sasl_plain(make_broker, start_console, tmp_path: Path) -> None:
    sasl_port = free_port()
    broker = make_broker({
        "listeners": f"PLAINTEXT://{HOST}:{{port}},SASL_PLAINTEXT://{HOST}:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS_SERVER,
    })
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("secured", 2, 1)])["secured"].result(30)
    good = client_properties(tmp_path / "good.properties", "alice-secret")
    console = start_console(f"{HOST}:{sasl_port}", "--command-config", str(good),
                            "--timeout", "10")
    topics = {t["name"]: t for t in get(console.port, "/api/topics").json()}
    assert [(p["start"], p["end"]) for p in topics["secured"]["partitions"]] == [(0, 0), (0, 0)]
    assert topics["secured"]["size"] is None  # log-dir sizes are read over PLAINTEXT only
    assert get(console.port, "/topics/secured").status == 200

    bad = client_properties(tmp_path / "bad.properties", "wrong")
    refused = start_console(f"{HOST}:{sasl_port}", "--command-config", str(bad),
                            "--timeout", "3")
    reply = get(refused.port, "/topics")
    assert reply.status == 503 and "Traceback" not in reply.text
