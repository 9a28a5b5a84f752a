"""kafka-consumer-groups.sh against live classic and KIP-848 groups on one Strom broker."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer

from .. import clients as kc
from ..test_groups import consume_values, settle
from . import state
from .tools import rows, unique

pytestmark = pytest.mark.timeout(240)
NO_OFFSET = -1001  # what the client reports for a partition without a committed offset


def test_list_describe_reset_delete(kafka_tools, strom_broker):
    bs = strom_broker.bootstrap
    topic, classic, modern = unique("cg"), unique("cg-classic"), unique("cg-848")
    kc.create_topic(bs, topic, 2)
    kc.produce(bs, topic, [kc.Msg(None, b"v%d" % i, partition=i % 2) for i in range(10)])
    members = {classic: member(bs, classic, "tools-classic"),
               modern: member(bs, modern, "tools-848", group_protocol="consumer")}
    for c in members.values():
        c.subscribe([topic])
    try:
        for c in members.values():
            settle([c], topic, 2)
            consume_values(c, 10)
            c.commit(asynchronous=False)
        _check_live_groups(kafka_tools, bs, topic, classic, modern)
    finally:
        for c in members.values():
            c.close()
    _check_reset_and_delete(kafka_tools, bs, topic, classic)
    run = kafka_tools.run
    run("kafka-consumer-groups", "--bootstrap-server", bs, "--delete", "--group", modern)
    assert modern not in state.group_ids(bs)
    missing = run("kafka-consumer-groups", "--bootstrap-server", bs, "--describe",
                  "--group", classic)
    assert f"Group {classic} not found." in missing.stdout + missing.stderr


def member(bs: str, group: str, client_id: str, **conf: str) -> Consumer:
    """A confluent-kafka group member with the broker's default session settings."""
    return Consumer({"bootstrap.servers": bs, "group.id": group, "client.id": client_id,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     **{k.replace("_", "."): v for k, v in conf.items()}})


def _check_live_groups(kafka_tools, bs: str, topic: str, classic: str, modern: str) -> None:
    def cg(*args: str) -> str:
        return kafka_tools.run("kafka-consumer-groups", "--bootstrap-server", bs, *args).stdout

    listed = cg("--list").split()
    assert classic in listed and modern in listed
    types = {r[0]: r[1] for r in rows(cg("--list", "--type"))[1:]}
    assert (types[classic], types[modern]) == ("Classic", "Consumer")
    stable = [r[0] for r in rows(cg("--list", "--state", "stable"))[1:]]
    assert classic in stable and modern in stable

    for group, client, strategy in ((classic, "tools-classic", "range"),
                                    (modern, "tools-848", "uniform")):
        table = rows(cg("--describe", "--group", group))
        assert table[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                            "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        assert sorted((r[2], r[3], r[4], r[5], r[8]) for r in table[1:]) == [
            ("0", "5", "5", "0", client), ("1", "5", "5", "0", client)]
        members = rows(cg("--describe", "--group", group, "--members", "--verbose"))
        assert len(members) == 2, members
        member = dict(zip(members[0], members[1], strict=False))
        assert (member["CLIENT-ID"], member["#PARTITIONS"]) == (client, "2")
        assert member["CURRENT-ASSIGNMENT"] == f"{topic}:0,1"
        head, row = rows(cg("--describe", "--group", group, "--state"))
        assert row[-3:] == [strategy, "Stable", "1"], (head, row)

    # Kafka's tool refuses to move a live group's offsets (and says so).
    out = cg("--group", classic, "--reset-offsets", "--to-earliest", "--topic", topic,
             "--execute")
    assert f"Assignments can only be reset if the group '{classic}' is inactive" in out
    assert state.committed(bs, classic, topic, 2) == [5, 5]


def _check_reset_and_delete(kafka_tools, bs: str, topic: str, group: str) -> None:
    def cg(*args: str) -> str:
        return kafka_tools.run("kafka-consumer-groups", "--bootstrap-server", bs, *args).stdout

    head, row = rows(cg("--describe", "--group", group, "--state"))
    assert row[-2:] == ["Empty", "0"], (head, row)
    plan = rows(cg("--group", group, "--reset-offsets", "--to-earliest", "--topic", topic,
                   "--dry-run"))
    assert sorted(plan[1:]) == [[group, topic, "0", "0"], [group, topic, "1", "0"]]
    assert state.committed(bs, group, topic, 2) == [5, 5]  # a dry run changes nothing
    cg("--group", group, "--reset-offsets", "--to-earliest", "--topic", topic, "--execute")
    assert state.committed(bs, group, topic, 2) == [0, 0]
    cg("--group", group, "--reset-offsets", "--shift-by", "2", "--all-topics", "--execute")
    assert state.committed(bs, group, topic, 2) == [2, 2]
    cg("--group", group, "--reset-offsets", "--to-latest", "--topic", f"{topic}:1", "--execute")
    assert state.committed(bs, group, topic, 2) == [2, 5]
    cg("--group", group, "--reset-offsets", "--to-offset", "4", "--topic", f"{topic}:0",
       "--execute")
    assert state.committed(bs, group, topic, 2) == [4, 5]

    out = cg("--delete-offsets", "--group", group, "--topic", topic)
    assert rows(out)[-2:] == [[topic, "0", "Successful"], [topic, "1", "Successful"]], out
    assert state.committed(bs, group, topic, 2) == [NO_OFFSET, NO_OFFSET]
    out = cg("--delete", "--group", group)
    assert f"Deletion of requested consumer groups ('{group}') was successful." in out
    assert group not in state.group_ids(bs)
