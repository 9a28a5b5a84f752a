"""Kafka 4.4's share-group tools: ``kafka-share-groups`` (ShareGroupCommand: list, describe,
reset-offsets, delete-offsets, delete) and ``kafka-console-share-consumer`` (ConsoleShareConsumer,
with its --release and --reject options). What they print was taken from Apache Kafka 4.4
(``STROM_SHARE_BROKER=kafka``).
"""

from __future__ import annotations

import time

from ..kafka_tools.tools import rows
from .conftest import unique

WAIT = 60.0


def until(check, timeout: float, what: str):
    """Poll ``check()`` (each call runs a tool) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.2)  # poll interval


def test_kafka_share_groups(share_broker, share_admin, share_apps, kafka_tools):
    def tool(*args: str, code: int | None = 0):
        return kafka_tools.run("kafka-share-groups", "--bootstrap-server", share_broker.bootstrap,
                               *args, code=code)  # fmt: skip

    def table(*args: str) -> list[list[str]]:
        return rows(tool(*args).stdout)

    def state_and_members() -> list[str] | None:
        out = tool("--describe", "--group", group, "--state").stdout
        if "failed due to org.apache.kafka.common.errors.TimeoutException" in out:
            return None  # the tool's own deadline passed on a loaded machine: ask again
        lines = rows(out)
        assert len(lines) == 2 and lines[0][3:] == ["STATE", "#MEMBERS"], out
        return lines[1][3:]

    a = share_admin.create_topic(unique("tools-a"))
    b = share_admin.create_topic(unique("tools-b"), partitions=2)
    group = unique("tools-g")
    share_admin.set_group_configs(group, {"share.auto.offset.reset": "earliest"})
    share_admin.produce(a, ["a0", "a1", "a2"])
    share_admin.produce(b, ["b0", "b1", "b2"], partition=0)
    app = share_apps("tools", group, a, consumers=2, extra=["--topic", b])
    app.wait_for(lambda x: len(x.deliveries()) >= 6, WAIT, "6 deliveries")

    assert group in tool("--list").stdout.split()
    assert [group, "Stable"] in table("--list", "--state")
    assert [group, "Stable"] in table("--list", "--state", "Stable")
    assert [group, "Stable"] not in table("--list", "--state", "Empty")

    state = table("--describe", "--group", group, "--state")
    assert state[0] == ["GROUP", "COORDINATOR", "(ID)", "STATE", "#MEMBERS"]
    # the coordinator: the broker itself, or one of a cluster's brokers
    assert state[1][0] == group and state[1][1] in share_broker.bootstrap.split(",") and state[1][3:] == ["Stable", "2"]
    verbose = table("--describe", "--group", group, "--state", "--verbose")
    assert verbose[0] == ["GROUP", "COORDINATOR", "(ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert verbose[1][3] == "Stable" and verbose[1][4] == verbose[1][5] and verbose[1][6] == "2"

    members = table("--describe", "--group", group, "--members")
    assert members[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
    assert sorted(m[3] for m in members[1:]) == ["tools-0", "tools-1"]
    def partitions(cell: str) -> list[str]:  # "t:0,1;u:2" -> ["t:0", "t:1", "u:2"]
        return [f"{t}:{p}" for entry in cell.split(";") for t, ps in [entry.rsplit(":", 1)]
                for p in ps.split(",")]

    assigned = sorted(p for m in members[1:] for p in partitions(m[5]))
    assert assigned == sorted([f"{a}:0", f"{b}:0", f"{b}:1"]), "each partition to one member"
    assert all(m[2] == "/127.0.0.1" and int(m[4]) == len(partitions(m[5])) for m in members[1:])
    verbose = table("--describe", "--group", group, "--members", "--verbose")
    assert verbose[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH", "ASSIGNMENT"]

    def offsets() -> dict[tuple[str, str], list[str]]:
        out = tool("--describe", "--group", group).stdout  # --offsets is the default
        lines = rows(out)
        assert lines[0] == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"], out
        return {(r[1], r[2]): r[3:] for r in lines[1:] if r[0] == group}

    def lag(now: dict[tuple[str, str], list[str]], tp: tuple[str, str]) -> str | None:
        return now.get(tp, [None, None])[1]

    until(lambda: (now := offsets()) and lag(now, (a, "0")) == lag(now, (b, "0")) == "0", WAIT, "lag 0")
    # partition 1 of b has no records yet and no share-partition state: shown as "-"
    assert offsets()[(b, "1")] == ["-", "-"]
    verbose = table("--describe", "--group", group, "--offsets", "--verbose")
    assert verbose[0] == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"]

    # reset-offsets and delete want an empty group
    refused = tool("--reset-offsets", "--group", group, "--to-earliest", "--topic", a, "--execute", code=1)
    assert f"Share group '{group}' is not empty." in refused.stderr
    refused = tool("--delete", "--group", group)  # exit status 0 all the same
    assert "Error: Deletion of some share groups failed:" in refused.stdout
    assert (f"* Group '{group}' could not be deleted due to: org.apache.kafka.common.errors."
            f"GroupNotEmptyException: Share group '{group}' is not EMPTY.") in refused.stdout  # fmt: skip

    assert app.finish() == 0
    until(lambda: state_and_members() == ["Empty", "0"], WAIT, "Empty")
    assert f"Share group '{group}' has no active members." in tool("--describe", "--group", group, "--members").stderr

    dry = table("--reset-offsets", "--group", group, "--to-earliest", "--topic", a, "--dry-run")
    assert dry == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [group, a, "0", "0"]]
    assert table("--reset-offsets", "--group", group, "--to-earliest", "--topic", a, "--execute") == dry
    to_one = table("--reset-offsets", "--group", group, "--to-offset", "1", "--topic", b, "--execute")
    # partition 1 is empty: offset 1 is past its end, the tool warns and uses 0
    assert sorted(to_one[1:]) == [[group, b, "0", "1"], [group, b, "1", "0"]]
    assert offsets() == {(a, "0"): ["0", "3"], (b, "0"): ["1", "2"], (b, "1"): ["0", "0"]}

    again = share_apps("tools-again", group, a, extra=["--topic", b])
    again.wait_for(lambda x: len(x.deliveries()) >= 5, WAIT, "the reset records")
    assert sorted(d.value for d in again.deliveries()) == ["a0", "a1", "a2", "b1", "b2"]
    assert {d.delivery_count for d in again.deliveries()} == {1}
    assert again.finish() == 0
    until(lambda: state_and_members() == ["Empty", "0"], WAIT, "Empty")

    assert table("--delete-offsets", "--group", group, "--topic", b) == [["TOPIC", "STATUS"], [b, "Successful"]]
    assert table("--delete-offsets", "--group", group, "--topic", "no-such-topic") == [
        ["TOPIC", "STATUS"], ["no-such-topic", "Error:", "This", "server", "does", "not", "host", "this",
                              "topic-partition."]]  # fmt: skip
    assert set(offsets()) == {(a, "0")}

    deleted = tool("--delete", "--group", group)
    assert f"Deletion of requested share groups ('{group}') was successful." in deleted.stdout
    assert group not in tool("--list").stdout.split()
    gone = tool("--describe", "--group", group)  # exit status 0
    assert (f"Error: Executing share group command failed due to org.apache.kafka.common.errors."
            f"GroupIdNotFoundException: Group {group} not found.") in gone.stdout  # fmt: skip
    again = tool("--delete", "--group", group)
    assert (f"GroupIdNotFoundException: Group '{group}' is not a share group.") in again.stdout


def test_kafka_console_share_consumer(share_broker, share_admin, kafka_tools):
    topic = share_admin.create_topic(unique("console"))
    values = [f"c{i}" for i in range(5)]
    share_admin.produce(topic, values)

    def consume(group: str, count: int, *flags: str) -> list[str]:
        share_admin.set_group_configs(group, {"share.auto.offset.reset": "earliest"})
        proc = kafka_tools.run("kafka-console-share-consumer", "--bootstrap-server", share_broker.bootstrap,
                               "--topic", topic, "--group", group, "--max-messages", str(count),
                               "--formatter-property", "print.offset=true",
                               "--formatter-property", "print.delivery=true", *flags,
                               timeout=WAIT)  # fmt: skip
        assert f"Processed a total of {count} messages" in proc.stderr
        return proc.stdout.splitlines()

    def lines(delivery: int, offsets: range) -> list[str]:
        return [f"Offset:{o}\tDelivery:{delivery}\tc{o}" for o in offsets]

    plain = unique("console-plain")
    assert consume(plain, 5) == lines(1, range(5))

    released = unique("console-release")
    assert consume(released, 5, "--release") == lines(1, range(5))
    assert consume(released, 5) == lines(2, range(5))

    rejected = unique("console-reject")
    assert consume(rejected, 5, "--reject") == lines(1, range(5))
    (marker,) = share_admin.produce(topic, ["marker"])
    assert consume(rejected, 1) == [f"Offset:{marker}\tDelivery:1\tmarker"]
