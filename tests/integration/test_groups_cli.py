"""`strom groups list|describe|delete|reset-offsets` against live groups (run as subprocesses)."""

from __future__ import annotations

import subprocess
import time

import pytest
from confluent_kafka import TopicPartition

from . import clients as kc
from .broker import STROM_BIN
from .test_groups import GROUP_OVERRIDES, committed, consume_values, group_consumer, settle

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(make_module_broker):
    return make_module_broker(GROUP_OVERRIDES)


def strom(bs: str, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    argv = [str(STROM_BIN), "groups", *args, "--bootstrap-server", bs, "--timeout", "20"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == code, (argv, proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    if code:
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    return proc


def table(text: str) -> list[list[str]]:
    """Rows of a printed table (header first), split on whitespace."""
    return [line.split() for line in text.splitlines() if line.strip()]


def produce_timed(bs: str, topic: str, stamps: list[int]) -> None:
    kc.produce(bs, topic, [kc.Msg(None, b"v%d" % i, timestamp=ts, partition=0)
                           for i, ts in enumerate(stamps)])


def test_describe_and_list_live_group(broker, unique_topic):
    bs = broker.bootstrap
    topic = unique_topic("cli")
    kc.create_topic(bs, topic, 2)
    group = unique_topic("g")
    kc.produce(bs, topic, [kc.Msg(None, b"x%d" % i, partition=i % 2) for i in range(10)])
    c = group_consumer(bs, group, client_id="cli-test-client")
    try:
        c.subscribe([topic])
        settle([c], topic, 2)
        consume_values(c, 6)
        c.commit(asynchronous=False)
        done = committed(bs, group, topic, 2)
        rows = table(strom(bs, "describe", group).stdout)
        assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                           "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        body = {int(r[2]): r for r in rows[1:]}
        assert set(body) == {0, 1}
        for p, r in body.items():
            assert r[0] == group and r[1] == topic
            assert (int(r[3]), int(r[4]), int(r[5])) == (done[p], 5, 5 - done[p])
            assert r[7] == "/127.0.0.1" and r[8] == "cli-test-client"
        members = table(strom(bs, "describe", group, "--members").stdout)
        assert members[1][-2] == "2" and topic in members[1][-1]
        state = table(strom(bs, "describe", group, "--state").stdout)
        assert state[1][0] == group and "Stable" in state[1] and state[1][-1] == "1"
        assert group in strom(bs, "list").stdout.split()
        listed = table(strom(bs, "list", "--state", "stable").stdout)
        assert [group, "Stable", "classic"] in listed
        assert group not in strom(bs, "list", "--state", "Empty").stdout
        # an active group is not reset, and not deleted
        err = strom(bs, "reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                    "--execute", code=1).stderr
        assert "can only be reset if the group" in err and "Stable" in err
        assert "not empty" in strom(bs, "delete", group, code=1).stderr
    finally:
        c.close()
    assert committed(bs, group, topic, 2) == done


def test_reset_offsets_scenarios(broker, unique_topic):
    bs = broker.bootstrap
    topic = unique_topic("reset")
    kc.create_topic(bs, topic, 2)
    group = unique_topic("g")
    now = int(time.time() * 1000)
    stamps = [now - 3_600_000 * (10 - i) for i in range(10)]  # one record an hour, 10 h ago on
    produce_timed(bs, topic, stamps)

    def reset(*args: str) -> dict[int, int]:
        out = strom(bs, "reset-offsets", "--group", group, *args).stdout
        return {int(r[2]): int(r[4]) for r in table(out)[1:]}

    dry = strom(bs, "reset-offsets", "--group", group, "--topic", topic, "--to-latest")
    assert "dry run" in dry.stderr
    assert {int(r[2]): int(r[4]) for r in table(dry.stdout)[1:]} == {0: 10, 1: 0}
    assert committed(bs, group, topic, 2) == [-1001, -1001]  # nothing changed
    assert reset("--topic", topic, "--to-latest", "--execute") == {0: 10, 1: 0}
    assert committed(bs, group, topic, 2) == [10, 0]
    assert reset("--topic", f"{topic}:0", "--to-offset", "4", "--execute") == {0: 4}
    assert reset("--topic", f"{topic}:0", "--to-offset", "99", "--execute") == {0: 10}  # clamped
    assert reset("--topic", f"{topic}:0", "--shift-by", "-3", "--execute") == {0: 7}
    assert reset("--all-topics", "--shift-by", "-100", "--execute") == {0: 0, 1: 0}
    assert reset("--topic", f"{topic}:0", "--by-duration", "PT2H30M", "--execute") == {0: 8}
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime((stamps[5] - 1000) / 1000))
    assert reset("--topic", f"{topic}:0", "--to-datetime", when, "--execute") == {0: 5}
    assert reset("--topic", topic, "--to-earliest", "--execute") == {0: 0, 1: 0}
    assert committed(bs, group, topic, 2) == [0, 0]
    # the group resumes where the reset put it
    c = group_consumer(bs, group)
    try:
        c.subscribe([topic])
        assert [o for _, o, _ in consume_values(c, 2)] == [0, 1]
    finally:
        c.close()
    assert c is not None
    # usage errors: exit code 2, one line
    for bad in (["--topic", topic], ["--topic", topic, "--to-earliest", "--to-latest"],
                ["--topic", topic, "--by-duration", "soon"],
                ["--topic", f"{topic}:x", "--to-earliest"],
                ["--to-earliest"]):
        strom(bs, "reset-offsets", "--group", group, *bad, code=2)
    assert "does not exist" in strom(bs, "reset-offsets", "--group", group, "--topic",
                                     "no-such-topic-here", "--to-earliest", code=1).stderr


def test_delete_and_unknown_groups(broker, unique_topic):
    bs = broker.bootstrap
    topic = unique_topic("del")
    kc.create_topic(bs, topic, 1)
    group = unique_topic("g")
    c = group_consumer(bs, group)
    c.assign([TopicPartition(topic, 0)])
    c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    c.close()
    assert group in strom(bs, "list").stdout.split()
    assert "was successful" in strom(bs, "delete", group).stdout
    assert group not in strom(bs, "list").stdout.split()
    assert committed(bs, group, topic, 1) == [-1001]
    assert "does not exist" in strom(bs, "delete", group, code=1).stderr
    assert "does not exist" in strom(bs, "describe", group, code=1).stderr
    strom(bs, "list", "--state", "sleeping", code=2)
