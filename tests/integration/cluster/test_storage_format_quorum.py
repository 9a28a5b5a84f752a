"""Three controllers formatted with ``strom storage format`` (not a hand-written meta.properties)
start and elect a leader; an unformatted one refuses to start with one line; SCRAM users of
``--add-scram`` authenticate from the first start (issue 30, item 3).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from .. import clients as kc
from ..broker import HOST, BrokerProcess, free_port
from .conftest import _wait_registered, make_kraft_nodes
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



SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required"
PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"


def test_scram_users_of_add_scram_authenticate_from_the_first_start(
        tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> None:
    """``strom storage format --add-scram``: three combined nodes whose inter-broker listener
    takes only SCRAM-SHA-256 replicate from their first start, with a credential nobody could
    have added through the running cluster yet: the bootstrap snapshot's. The listener refuses
    a wrong password."""
    overrides = {
        "listeners": f"PLAINTEXT://{HOST}:{{port}},INTERNAL://{HOST}:0",
        "listener.security.protocol.map":
            "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "listener.name.internal.scram-sha-256.sasl.jaas.config":
            f'{SCRAM_LOGIN} username="broker" password="broker-secret";',
        # as Kafka's documentation pairs them: PLAIN between controllers (their listener
        # authenticates before any metadata is committed), SCRAM between brokers
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config":
            f'{PLAIN_LOGIN} username="admin" password="admin-secret" '
            'user_admin="admin-secret";',
        "metrics.listener": "",
    }
    cluster = make_kraft_nodes(tmp_path_factory, "fmt-scram", 3, overrides)
    request.addfinalizer(cluster.discard)
    internal = {}
    for node in cluster.brokers:
        internal[node.name] = free_port()
        node.overrides["listeners"] = node.overrides["listeners"].replace(
            f"INTERNAL://{HOST}:0", f"INTERNAL://{HOST}:{internal[node.name]}")
        node.add_scram = ['SCRAM-SHA-256=[name=broker,password="broker-secret",iterations=8192]',
                          "SCRAM-SHA-512=[name=alice,password=alice-secret]"]
        node.start(wait=False)
    for node in cluster.brokers:
        node.wait_ready()
    _wait_registered(cluster.brokers)
    bootstrap = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("scram-t", 1, 3, config={"min.insync.replicas": "3"})],
                        operation_timeout=30)["scram-t"].result(40)
    sent = kc.sample_messages("s")
    kc.produce(bootstrap, "scram-t", sent, partition=0, acks="all")  # all three replicas
    assert [m.value for m in kc.read_partition(bootstrap, "scram-t", 0)] == \
        [m.value for m in sent]

    errors: list[KafkaError] = []
    port = internal[cluster.brokers[0].name]
    wrong = AdminClient({"bootstrap.servers": f"{HOST}:{port}", "log_level": 0,
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                         "sasl.username": "broker", "sasl.password": "not-its-secret",
                         "error_cb": errors.append})
    with pytest.raises(KafkaException):
        wrong.list_topics(timeout=5)
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        wrong.poll(0.2)  # serves error_cb
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    for node in cluster.brokers:
        assert "cannot authenticate" not in node.log_text(), node.log_tail()
