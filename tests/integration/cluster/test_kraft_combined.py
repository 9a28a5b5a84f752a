"""A combined KRaft node on a quorum of itself, as ``make run`` starts it (issue 30, stage 5).

Its metadata goes through its Raft log (the CONTROLLER listener answers DescribeQuorum), survives
kill -9, and an old single node's data directory (embedded metadata log with its own snapshot
format) is upgraded in place by starting it as a KRaft node.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import ConfigResource

from .. import clients as kc
from ..broker import BrokerProcess
from ..kafka_tools import jars
from ..kafka_tools.tools import KafkaTools
from ..metrics.test_metrics_endpoint import scrape
from .test_kraft_quorum import describe_quorum, poll

STROM = Path(sys.executable).with_name("strom")
OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3",
             "metrics.listener": ""}


def _controller(node: BrokerProcess) -> BrokerProcess:
    """A handle on the node's CONTROLLER listener, for DescribeQuorum."""
    return BrokerProcess(node.base_dir, data_dir=node.data_dir, port=node.controller_port,
                         name=f"{node.name}-controller", kraft=False)


def _group_offset(bootstrap: str, group: str, topic: str) -> int:
    a = kc.admin(bootstrap)
    res = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, 0)])], request_timeout=20)
    return res[group].result(20).topic_partitions[0].offset


def test_a_combined_node_commits_metadata_through_its_quorum_and_survives_kill_9(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    node = BrokerProcess(tmp_path_factory.mktemp("kraft-combined"), name="kraft-combined",
                         kraft=True)
    try:
        node.start(OVERRIDES)
        quorum = describe_quorum(_controller(node))
        assert quorum is not None and quorum["leader_id"] == 0, quorum
        hw_before = quorum["high_watermark"]

        kc.create_topic(node.bootstrap, "orders", 2, {"retention.ms": "600000"})
        kc.produce(node.bootstrap, "orders", kc.sample_messages("k"), partition=0)
        c = kc.consumer(node.bootstrap, **{"group.id": "g1"})
        c.assign([TopicPartition("orders", 0, 0)])
        got = kc.poll_messages(c, 3)
        c.commit(offsets=[TopicPartition("orders", 0, got[-1].offset + 1)], asynchronous=False)
        c.close()
        # the topic's records reached the quorum's log and its high watermark
        after = poll(lambda: (q := describe_quorum(_controller(node))) is not None
                     and q["high_watermark"] > hw_before and q, 10, "the metadata HW to move")
        assert after["leader_epoch"] >= 1

        node.restart(kill=True)
        assert kc.topic_names(node.bootstrap) >= {"orders", "__consumer_offsets"}
        kc.wait_for_topic(node.bootstrap, "orders", 2)
        assert [m.value for m in kc.consume(node.bootstrap, "orders", 3)] == \
            [m.value for m in got]
        assert _group_offset(node.bootstrap, "g1", "orders") == got[-1].offset + 1
        admin = kc.admin(node.bootstrap)  # kept alive until the future resolves
        described = admin.describe_configs([ConfigResource("topic", "orders")])
        configs = next(iter(described.values())).result(20)
        assert configs["retention.ms"].value == "600000"
        again = describe_quorum(_controller(node))
        assert again is not None and again["leader_epoch"] > after["leader_epoch"]
        # a change after the restart commits too
        kc.create_topic(node.bootstrap, "later", 1)
        assert "later" in kc.topic_names(node.bootstrap)

        # Kafka's tool through the broker listener, as its quick start uses it
        tools = KafkaTools.create(jars.libs_dir(), tmp_path_factory.mktemp("kafka-tools"))
        out = tools.run("kafka-metadata-quorum", "--bootstrap-server", node.bootstrap,
                        "describe", "--status").stdout
        status = dict(re.findall(r"^(\w+):\s+(.*)$", out, re.M))
        assert (status["ClusterId"], status["LeaderId"]) == ("kraft-it-cluster-0000A", "0")
        assert int(status["LeaderEpoch"]) == again["leader_epoch"]
        assert int(status["HighWatermark"]) >= again["high_watermark"]
    finally:
        node.stop()


def test_an_old_single_node_directory_is_upgraded_in_place(make_broker) -> None:
    old = make_broker({"metrics.listener": ""})
    # over 1,000 metadata records: the old node writes a snapshot of its own format, and the
    # records before it may be gone from its log
    kc.create_topic(old.bootstrap, "wide", 1001)
    kc.create_topic(old.bootstrap, "kept", 1)
    sent = kc.produce(old.bootstrap, "kept", kc.sample_messages("u"), partition=0)
    assert old.stop() == 0
    metadata = old.data_dir / "__cluster_metadata-0"
    assert any(len(p.name) == 31 for p in metadata.glob("*.checkpoint"))  # <offset>.checkpoint

    node = BrokerProcess(old.base_dir, data_dir=old.data_dir, port=old.port, name="upgraded",
                         kraft=True)  # meta.properties exists: no format, as with make run
    try:
        node.start({"metrics.listener": ""})
        names = kc.topic_names(node.bootstrap)
        assert {"wide", "kept"} <= names
        kc.wait_for_topic(node.bootstrap, "wide", 1001, timeout=60)
        assert [m.value for m in kc.consume(node.bootstrap, "kept", len(sent))] == \
            [m.value for m in sent]
        kafka_snapshots = [p.name for p in metadata.glob("*-*.checkpoint")]
        assert len(kafka_snapshots) == 1, kafka_snapshots
        assert any(len(p.name) == 31 for p in metadata.glob("*.checkpoint"))  # old one kept
        assert "upgraded the single node's metadata" in node.log_text()
    finally:
        node.stop()


def test_the_idle_quorum_writes_no_op_records_and_the_metrics_show_the_metadata_lag(
        tmp_path: Path) -> None:
    """metadata.max.idle.interval.ms (Kafka's 500; 100 here): the active controller writes a
    no-op record that often, so the metadata log moves with no change made, and KIP-835's
    gauges show how old the last applied record is: under a few intervals on a node that
    keeps up."""
    node = BrokerProcess(tmp_path, name="kraft-idle", kraft=True)
    try:
        node.start({"metadata.max.idle.interval.ms": "100"})
        _no_op_records_and_gauges(node)
    finally:
        node.stop()


def _no_op_records_and_gauges(node: BrokerProcess) -> None:
    controller = _controller(node)
    first = describe_quorum(controller)
    assert first is not None
    grown = poll(lambda: (q := describe_quorum(controller)) is not None
                 and q["high_watermark"] >= first["high_watermark"] + 5 and q,
                 10, "five no-op records")
    assert kc.topic_names(node.bootstrap) == set()  # nothing else was written

    def gauges() -> dict[str, float]:
        found = {}
        for (name, _labels), value in scrape(node.metrics_url).items():
            if name.startswith(("kafka_server_brokermetadatametrics_",
                                "kafka_controller_kafkacontroller_last")):
                found[name] = value
        return found

    seen = poll(lambda: (g := gauges()).get(
        "kafka_server_brokermetadatametrics_last_applied_record_offset", -1)
        >= grown["high_watermark"] - 1 and g, 10, "the gauges past the no-op records")
    offset = seen["kafka_server_brokermetadatametrics_last_applied_record_offset"]
    assert seen["kafka_controller_kafkacontroller_lastappliedrecordoffset"] == offset
    assert seen["kafka_controller_kafkacontroller_lastcommittedrecordoffset"] >= offset
    assert 0 <= seen["kafka_server_brokermetadatametrics_last_applied_record_lag_ms"] < 5000
    stamp = seen["kafka_server_brokermetadatametrics_last_applied_record_timestamp"]
    assert abs(stamp / 1000 - time.time()) < 60, stamp


@pytest.mark.parametrize(("overrides", "said"), [
    ({"process.roles": "broker"},
     "node.id=0 is in controller.quorum.voters but process.roles has no controller role"),
    ({"controller.quorum.voters": "1@127.0.0.1:{cport}"},
     "node.id 0 of a controller must be one of the voters in controller.quorum.voters"),
])
def test_a_quorum_that_does_not_fit_the_roles_is_refused_with_one_line(
        tmp_path: Path, overrides: dict[str, str], said: str) -> None:
    node = BrokerProcess(tmp_path, name="refused", kraft=True)
    node.overrides = {"metrics.listener": ""}
    node.format_storage()
    settings = {k: v.replace("{cport}", str(node.controller_port)) for k, v in overrides.items()}
    cmd = node.command()
    for key, value in settings.items():
        cmd += ["--override", f"{key}={value}"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert res.returncode != 0
    assert said in res.stdout + res.stderr, res.stdout + res.stderr
