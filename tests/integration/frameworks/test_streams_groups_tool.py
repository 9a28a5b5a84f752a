"""Kafka's `kafka-streams-groups` tool (4.4) on a Strom streams group (KIP-1071).

One WordCount instance with `group.protocol=streams` counts keyed lines spread over every input
partition; the tool lists the group, describes its state, members and offsets, and once the
instance has stopped resets the group's input offsets and deletes the group, as it does on
Kafka. A second test kills the broker under a running instance and checks with the tool that
the group came back from `__consumer_offsets` without a rebalance.
"""

from __future__ import annotations

import pytest

from ..clients import create_topic, producer
from ..kafka_tools import jars
from ..kafka_tools.tools import KafkaTools, rows
from .jvm import wait_until
from .streams import OutputReader, active_tasks, state
from .test_streams import STREAMS_OVERRIDES

pytestmark = pytest.mark.slow

PARTITIONS = 4


@pytest.fixture(scope="module")
def broker(make_module_broker):
    return make_module_broker(STREAMS_OVERRIDES)


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> KafkaTools:
    return KafkaTools.create(jars.ensure_libs(), tmp_path_factory.mktemp("kafka-tools"))


def test_list_describe_reset_and_delete(broker, jvms, framework_libs, streams_classes, tools,
                                        tmp_path, unique_topic) -> None:
    bootstrap = broker.bootstrap
    source, sink, app_id = unique_topic("lines"), unique_topic("counts"), unique_topic("wc")
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, 2)
    app = jvms("wordcount", [framework_libs, streams_classes], "io.strom.frameworks.WordCount",
               [bootstrap, app_id, str(tmp_path / "state"), source, sink, "group.protocol=streams"])
    wait_until(lambda: state(app) == "RUNNING" and active_tasks(app), 90, "the instance running",
               lambda: f"{state(app)} {active_tasks(app)}")
    p = producer(bootstrap)
    for i in range(200):
        p.produce(source, key=f"k{i}".encode(), value=b"alpha bravo", partition=i % PARTITIONS)
    assert p.flush(30) == 0
    reader = OutputReader(bootstrap, sink, 2)
    try:
        wait_until(lambda: (reader.poll(), reader.latest().get("alpha") == 200)[1], 60,
                   "the counts", lambda: str(reader.latest()))
    finally:
        reader.close()

    def sgc(*args: str, code: int = 0) -> str:
        return tools.run("kafka-streams-groups", "--bootstrap-server", bootstrap, *args,
                         code=code).stdout

    assert app_id in sgc("--list").split()
    [header, row] = rows(sgc("--describe", "--group", app_id, "--state"))
    assert header[:3] == ["GROUP", "COORDINATOR", "(ID)"]
    assert row[0] == app_id and "Stable" in row and row[-1] == "1"
    members = sgc("--describe", "--group", app_id, "--members", "--verbose")
    [header, row] = [r for r in rows(members)]
    assert "MEMBER-PROTOCOL" in header and "streams" in row
    assert "ACTIVE:" in row and "0:[0,1,2,3];" in row and "1:[0,1,2,3];" in row
    committed = {(r[1], r[2]) for r in rows(sgc("--describe", "--group", app_id, "--offsets"))[1:]}
    assert {(source, str(p)) for p in range(PARTITIONS)} <= committed

    app.stop()
    wait_until(lambda: "Empty" in sgc("--describe", "--group", app_id, "--state"), 30,
               "the group to be empty")
    reset = rows(sgc("--reset-offsets", "--group", app_id, "--input-topic", source,
                     "--to-earliest", "--execute"))
    assert sorted((r[1], r[2], r[3]) for r in reset[1:]) == \
        [(source, str(p), "0") for p in range(PARTITIONS)]
    assert "was successful" in sgc("--delete", "--group", app_id)
    assert app_id not in sgc("--list").split()


def test_the_group_survives_a_broker_restart(make_broker, jvms, framework_libs, streams_classes,
                                             tools, tmp_path, unique_topic) -> None:
    """kill -9 of the broker under a running application: the streams group comes back from
    `__consumer_offsets` with its epoch, members and tasks, and counting goes on exactly once."""
    broker = make_broker(STREAMS_OVERRIDES)
    bootstrap = broker.bootstrap
    source, sink, app_id = unique_topic("lines"), unique_topic("counts"), unique_topic("wc")
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, 2)
    app = jvms("wordcount", [framework_libs, streams_classes], "io.strom.frameworks.WordCount",
               [bootstrap, app_id, str(tmp_path / "state"), source, sink, "group.protocol=streams"])
    wait_until(lambda: state(app) == "RUNNING" and active_tasks(app), 90, "the instance running",
               lambda: f"{state(app)} {active_tasks(app)}")

    def produce(n: int) -> None:
        p = producer(bootstrap, enable_idempotence=True)
        for i in range(n):
            p.produce(source, key=f"k{i}".encode(), value=b"alpha", partition=i % PARTITIONS)
        assert p.flush(30) == 0

    def epochs() -> tuple[str, str]:
        [_, row] = rows(tools.run("kafka-streams-groups", "--bootstrap-server", bootstrap,
                                  "--describe", "--group", app_id, "--state").stdout)
        return row[-3], row[-2]  # GROUP-EPOCH, TARGET-ASSIGNMENT-EPOCH

    produce(100)
    reader = OutputReader(bootstrap, sink, 2)
    try:
        wait_until(lambda: (reader.poll(), reader.latest().get("alpha") == 100)[1], 60,
                   "the first counts", lambda: str(reader.latest()))
        before = epochs()
        broker.restart(kill=True)
        produce(100)
        wait_until(lambda: (reader.poll(), reader.latest().get("alpha") == 200)[1], 90,
                   "the counts after the restart", lambda: f"{reader.latest()} {state(app)}")
        assert reader.updates["alpha"] == list(range(1, 201))
    finally:
        reader.close()
    assert epochs() == before  # no rebalance: the group was loaded, not rebuilt
    assert app.running
