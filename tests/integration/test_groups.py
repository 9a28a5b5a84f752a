"""Consumer groups with the classic protocol, with real clients (and raw requests for errors).

confluent-kafka (range and cooperative-sticky), kafka-python and aiokafka consumers split topics,
take over each other's partitions when a member leaves or its process is killed, commit and
resume, and keep their offsets across broker restarts (clean and kill -9).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from . import clients as kc
from .wire import Conn, Reader, array, i32, i64, string

pytestmark = pytest.mark.timeout(90)

SESSION_MS = 4000
GROUP_OVERRIDES = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "group.consumer.session.timeout.ms": 6000,
    "group.consumer.heartbeat.interval.ms": 500,
    # Kafka's lower bounds (45 s, 5 s) would refuse the two above at start-up
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.min.heartbeat.interval.ms": 100,
}

# Kafka error codes
NONE, OFFSET_METADATA_TOO_LARGE = 0, 12
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, INVALID_SESSION_TIMEOUT = 22, 25, 26
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, MEMBER_ID_REQUIRED = 68, 69, 79
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, INVALID_GROUP_ID = 15, 16, 24
FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 11, 12, 13, 14
INIT_PRODUCER_ID = 22
OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS, DELETE_GROUPS = 8, 9, 15, 42


@pytest.fixture(scope="module")
def broker(make_module_broker):
    return make_module_broker(GROUP_OVERRIDES)


# --------------------------------------------------------------------------- helpers


def group_consumer(bootstrap: str, group: str, **conf: object) -> Consumer:
    base = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": 500, "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000}
    base.update({k.replace("_", "."): v for k, v in conf.items()})
    return Consumer(base)


def owned(c: Consumer, topic: str) -> set[int]:
    return {tp.partition for tp in c.assignment() if tp.topic == topic}


def settle(consumers: list[Consumer], topic: str, partitions: int, timeout: float = 40.0,
           extra: Callable[[], Iterable[set[int]]] = lambda: (),
           sizes: list[int] | None = None) -> list[set[int]]:
    """Poll every consumer until each owns a share and together they own every partition once
    (and, with ``sizes``, the shares have those sizes: an incremental rebalance passes through
    covering splits on its way to the target one). Overlap is checked at every step: the group
    must never hand a partition out twice."""
    deadline = time.monotonic() + timeout
    shares: list[set[int]] = []
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.05)
        shares = [owned(c, topic) for c in consumers] + list(extra())
        assert_disjoint(shares)
        if all(shares) and set().union(*shares) == set(range(partitions)) and \
                (sizes is None or sorted(map(len, shares)) == sorted(sizes)):
            return shares
    raise AssertionError(f"no stable split of {partitions} partitions in {timeout}s: {shares}")


def assert_disjoint(shares: list[set[int]]) -> None:
    seen: set[int] = set()
    for s in shares:
        assert not (s & seen), f"a partition is owned twice: {shares}"
        seen |= s


def consume_values(c: Consumer, count: int, timeout: float = 30.0) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of the next `count` messages of a subscribed consumer."""
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        assert time.monotonic() < deadline, f"got {len(out)} of {count} messages: {out[-3:]}"
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise KafkaException(m.error())
        out.append((m.partition(), m.offset(), m.value()))
    return out


def produce_values(bootstrap: str, topic: str, values: list[bytes], partitions: int = 1) -> None:
    kc.produce(bootstrap, topic, [kc.Msg(None, v, partition=i % partitions)
                                  for i, v in enumerate(values)])


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    c = group_consumer(bootstrap, group)
    try:
        return [tp.offset for tp in c.committed([TopicPartition(topic, p)
                                                 for p in range(partitions)], timeout=20)]
    finally:
        c.close()


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.05)  # poll interval


CHILD = r"""
import json, sys
from confluent_kafka import Consumer
conf, topic = json.loads(sys.argv[1]), sys.argv[2]
c = Consumer(conf)
c.subscribe([topic])
last = None
while True:
    c.poll(0.1)
    now = sorted(tp.partition for tp in c.assignment())
    if now != last:
        print(json.dumps(now), flush=True)
        last = now
"""


class ChildConsumer:
    """A consumer in its own process (so a test can kill it), reporting its assignment."""

    def __init__(self, conf: dict, topic: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(conf), topic],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.assignment: set[int] = set()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.assignment = set(json.loads(line))

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


# --------------------------------------------------------------------------- confluent-kafka


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_consumers_split_and_take_over(broker, unique_topic, strategy):
    bs = broker.bootstrap
    topic = unique_topic("split")
    kc.create_topic(bs, topic, 6)
    group = unique_topic("g")
    consumers = [group_consumer(bs, group, partition_assignment_strategy=strategy)
                 for _ in range(3)]
    try:
        consumers[0].subscribe([topic])
        assert settle(consumers[:1], topic, 6) == [set(range(6))]
        consumers[1].subscribe([topic])
        two = settle(consumers[:2], topic, 6, sizes=[3, 3])
        consumers[2].subscribe([topic])
        three = settle(consumers, topic, 6, sizes=[2, 2, 2])
        if strategy == "cooperative-sticky":  # sticky: nobody lost what it could keep
            assert all(t <= s for t, s in zip(three[:2], two, strict=True))
        consumers[2].close()  # a clean leave: LeaveGroup
        settle(consumers[:2], topic, 6, sizes=[3, 3])
    finally:
        for c in consumers:
            c.close()


def test_killed_member_partitions_move_within_the_session_timeout(broker, unique_topic):
    bs = broker.bootstrap
    topic = unique_topic("kill")
    kc.create_topic(bs, topic, 4)
    group = unique_topic("g")
    child = ChildConsumer({"bootstrap.servers": bs, "group.id": group,
                           "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500}, topic)
    survivor = group_consumer(bs, group)
    try:
        wait_until(lambda: bool(child.assignment), 30, "the child process to join")
        survivor.subscribe([topic])
        # (the child's reports arrive late, so overlap is only checked within this process)
        deadline = time.monotonic() + 40
        while not (owned(survivor, topic) and child.assignment
                   and owned(survivor, topic) | child.assignment == set(range(4))
                   and not owned(survivor, topic) & child.assignment):
            assert time.monotonic() < deadline, (owned(survivor, topic), child.assignment)
            survivor.poll(0.05)
        killed_at = time.monotonic()
        child.kill()
        deadline = killed_at + SESSION_MS / 1000 + 10
        while owned(survivor, topic) != set(range(4)):
            assert time.monotonic() < deadline, "the dead member's partitions did not move"
            survivor.poll(0.1)
        assert time.monotonic() - killed_at >= SESSION_MS / 1000 - 1  # it waited for the session
    finally:
        child.kill()
        survivor.close()


def test_commit_then_restart_resumes_without_gaps(broker, unique_topic):
    bs = broker.bootstrap
    topic = unique_topic("resume")
    kc.create_topic(bs, topic, 2)
    group = unique_topic("g")
    values = [b"v%03d" % i for i in range(40)]
    produce_values(bs, topic, values, 2)
    first = group_consumer(bs, group)
    first.subscribe([topic])
    got = consume_values(first, 15)
    first.commit(asynchronous=False)
    first.close()
    second = group_consumer(bs, group)
    second.subscribe([topic])
    rest = consume_values(second, 25)
    second.close()
    seen = [v for _, _, v in got + rest]
    assert sorted(seen) == values  # at least once, and here exactly once: nothing is missing
    resumed = {p: min(o for pp, o, _ in rest if pp == p) for p in {p for p, _, _ in rest}}
    done = {p: max(o for pp, o, _ in got if pp == p) + 1 for p in {p for p, _, _ in got}}
    for p, start in resumed.items():
        assert start == done.get(p, 0)


def test_auto_commit(broker, unique_topic):
    bs = broker.bootstrap
    topic = unique_topic("auto")
    kc.create_topic(bs, topic, 1)
    group = unique_topic("g")
    produce_values(bs, topic, [b"a%d" % i for i in range(10)])
    c = group_consumer(bs, group, enable_auto_commit=True, auto_commit_interval_ms=200)
    c.subscribe([topic])
    consume_values(c, 10)
    wait_until(lambda: c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 10, 20,
               "the auto-commit")
    c.close()
    assert committed(bs, group, topic, 1) == [10]


def test_auto_offset_reset(broker, unique_topic):
    bs = broker.bootstrap
    topic = unique_topic("reset")
    kc.create_topic(bs, topic, 1)
    produce_values(bs, topic, [b"old-0", b"old-1"])
    earliest = group_consumer(bs, unique_topic("g"), auto_offset_reset="earliest")
    earliest.subscribe([topic])
    assert [v for _, _, v in consume_values(earliest, 2)] == [b"old-0", b"old-1"]
    earliest.close()
    latest = group_consumer(bs, unique_topic("g"), auto_offset_reset="latest")
    latest.subscribe([topic])
    # When exactly the consumer looks up the log end is not observable, so keep producing until
    # something arrives: whatever comes first must be new, never one of the two old records.
    deadline = time.monotonic() + 30
    first = None
    n = 0
    while first is None:
        assert time.monotonic() < deadline, "a latest consumer received nothing"
        produce_values(bs, topic, [b"new-%d" % n])
        n += 1
        for _ in range(5):
            m = latest.poll(0.1)
            if m is not None and not m.error():
                first = m.value()
                break
    assert first.startswith(b"new-")
    latest.close()
    none = group_consumer(bs, unique_topic("g"), auto_offset_reset="error")
    none.subscribe([topic])
    deadline = time.monotonic() + 30
    error = None
    while error is None:
        assert time.monotonic() < deadline, "no error without a committed offset"
        m = none.poll(0.2)
        if m is not None and m.error():
            error = m.error()
        elif m is not None:
            raise AssertionError(f"consumed {m.value()} without a committed offset")
    assert error.code() == KafkaError._AUTO_OFFSET_RESET
    none.close()


@pytest.mark.parametrize("kill", [False, True], ids=["clean", "kill-9"])
def test_offsets_survive_broker_restart(make_broker, unique_topic, kill):
    broker = make_broker(GROUP_OVERRIDES)
    bs = broker.bootstrap
    topic = unique_topic("durable")
    kc.create_topic(bs, topic, 3)
    group = unique_topic("g")
    produce_values(bs, topic, [b"m%d" % i for i in range(30)], 3)
    c = group_consumer(bs, group)
    c.subscribe([topic])
    first = consume_values(c, 12)
    c.commit(asynchronous=False)
    before = committed(bs, group, topic, 3)
    assert sum(max(o, 0) for o in before) == 12
    c.close()
    broker.restart(kill=kill)
    wait_until(lambda: committed(bs, group, topic, 3) == before, 30, "offsets after the restart")
    again = group_consumer(bs, group)
    again.subscribe([topic])
    rest = consume_values(again, 18)
    again.close()
    assert sorted(v for _, _, v in first + rest) == sorted(b"m%d" % i for i in range(30))
    for p in range(3):
        offsets = [o for pp, o, _ in rest if pp == p]
        if offsets:
            assert min(offsets) == max(before[p], 0)


def test_static_member_restart_keeps_its_partitions(broker, unique_topic):
    bs = broker.bootstrap
    topic = unique_topic("static")
    kc.create_topic(bs, topic, 4)
    group = unique_topic("g")
    revoked: list[list[int]] = []
    other = group_consumer(bs, group)
    static = group_consumer(bs, group, group_instance_id="instance-1",
                            session_timeout_ms=10000)
    try:
        static.subscribe([topic])
        other.subscribe([topic], on_revoke=lambda c, ps: revoked.append([p.partition
                                                                          for p in ps]))
        before = settle([static, other], topic, 4)
        revoked.clear()
        static.close()  # a static member does not leave the group when it closes
        static = group_consumer(bs, group, group_instance_id="instance-1",
                                session_timeout_ms=10000)
        static.subscribe([topic])
        after = settle([static, other], topic, 4)
        assert after == before
        for _ in range(20):  # the other member never rebalanced
            other.poll(0.05)
        assert revoked == []
    finally:
        static.close()
        other.close()


# --------------------------------------------------------------------------- other clients


def test_kafka_python_group_split_commit_and_resume(broker, unique_topic):
    from kafka import KafkaConsumer

    bs = broker.bootstrap
    topic = unique_topic("kp")
    kc.create_topic(bs, topic, 2)
    group = unique_topic("g")
    produce_values(bs, topic, [b"k%d" % i for i in range(20)], 2)

    def make():
        return KafkaConsumer(topic, bootstrap_servers=bs, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=10000, heartbeat_interval_ms=500,
                             fetch_max_wait_ms=100)

    # Each consumer polls in its own thread, as applications do (kafka-python blocks in poll
    # while its group rebalances). `a` keeps (and later commits) what it reads; `b` commits
    # nothing, so whatever b read is read again by the last consumer.
    # Polls are long enough for a whole rebalance: kafka-python 3.0.12 loses a join when a poll
    # times out in the middle of one that its leader started because topic metadata arrived
    # (the leader records its new assignment snapshot inside the join, so the next poll sees
    # nothing to rejoin and never finishes it: no assignment, no heartbeats). With 100 ms polls
    # that hit about one run in six, against this broker with no initial rebalance delay.
    got: list = []
    shares: dict[str, set[int]] = {"a": set(), "b": set()}
    stop = threading.Event()
    consumers = {"a": make(), "b": make()}

    def run(name: str) -> None:
        c = consumers[name]
        while not stop.is_set():
            records = c.poll(timeout_ms=1000, max_records=1)
            if name == "a":
                for recs in records.values():
                    got.extend(recs)
            shares[name] = {tp.partition for tp in c.assignment()}

    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in consumers]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: shares["a"] and shares["b"] and shares["a"] | shares["b"] == {0, 1}
                   and not shares["a"] & shares["b"], 60, f"a split of the partitions {shares}")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    a = consumers["a"]
    consumers["b"].close()
    deadline = time.monotonic() + 30
    while len(got) < 10:
        assert time.monotonic() < deadline
        for recs in a.poll(timeout_ms=200, max_records=10 - len(got)).values():
            got += recs
    a.commit()
    a.close()
    c = make()
    rest: list = []
    deadline = time.monotonic() + 30
    while len(got) + len(rest) < 20:
        assert time.monotonic() < deadline, f"resumed with {len(rest)} records"
        # a poll long enough for a whole join, as above: a 200 ms one lost the join once under
        # CI load ("No partition metadata for topic" from kafka-python's assignor, then nothing)
        for recs in c.poll(timeout_ms=1000, max_records=20).values():
            rest += recs
    c.close()
    assert sorted(r.value for r in got + rest) == sorted(b"k%d" % i for i in range(20))


def test_aiokafka_group_commit_and_resume(broker, unique_topic):
    from aiokafka import AIOKafkaConsumer

    bs = broker.bootstrap
    topic = unique_topic("aio")
    kc.create_topic(bs, topic, 2)
    group = unique_topic("g")
    produce_values(bs, topic, [b"a%d" % i for i in range(12)], 2)

    async def read(n: int) -> list:
        c = AIOKafkaConsumer(topic, bootstrap_servers=bs, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500)
        await c.start()
        try:
            out: list = []
            while len(out) < n:
                batch = await asyncio.wait_for(c.getmany(timeout_ms=200, max_records=n - len(out)),
                                               30)
                for recs in batch.values():
                    out += recs
            await c.commit()
            return out
        finally:
            await c.stop()

    async def main():
        first = await asyncio.wait_for(read(5), 60)
        second = await asyncio.wait_for(read(7), 60)
        return first, second

    first, second = asyncio.run(main())
    assert sorted(r.value for r in first + second) == sorted(b"a%d" % i for i in range(12))
    assert committed(bs, group, topic, 2) == [6, 6]


# --------------------------------------------------------------------------- raw requests


def find_coordinator_v1(conn: Conn, key: str, key_type: int = 0) -> tuple[int, int]:
    r = Reader(conn.request(FIND_COORDINATOR, 1, string(key) + bytes([key_type])))
    r.i32()  # throttle
    error = r.i16()
    r.string()
    node = r.i32()
    return error, node


def find_available(conn: Conn, key: str, key_type: int = 0, timeout: float = 10.0) -> int:
    """FindCoordinator until it stops answering COORDINATOR_NOT_AVAILABLE, as clients retry
    it (a broker answers so while it creates or takes up the internal topic): the node."""
    deadline = time.monotonic() + timeout
    while True:
        error, node = find_coordinator_v1(conn, key, key_type)
        if error != COORDINATOR_NOT_AVAILABLE:
            assert error == NONE, error
            return node
        assert time.monotonic() < deadline, f"{key}: coordinator not available in {timeout} s"
        time.sleep(0.05)


def join_v1(conn: Conn, group: str, member: str = "", session: int = 6000) -> dict:
    body = (string(group) + i32(session) + i32(6000) + string(member) + string("consumer")
            + array([string("range") + i32(0)]))
    r = Reader(conn.request(JOIN_GROUP, 1, body))
    out = {"error": r.i16(), "generation": r.i32(), "protocol": r.string(),
           "leader": r.string(), "member": r.string()}
    out["members"] = r.array(lambda r: (r.string(), r.nbytes()))
    return out


def heartbeat_v0(conn: Conn, group: str, generation: int, member: str) -> int:
    return Reader(conn.request(HEARTBEAT, 0, string(group) + i32(generation)
                               + string(member))).i16()


def sync_v0(conn: Conn, group: str, generation: int, member: str, assignment: bytes) -> int:
    body = (string(group) + i32(generation) + string(member)
            + array([string(member) + i32(len(assignment)) + assignment]))
    return Reader(conn.request(SYNC_GROUP, 0, body)).i16()


def commit_v2(conn: Conn, group: str, generation: int, member: str, topic: str, offset: int,
              metadata: str) -> int:
    body = (string(group) + i32(generation) + string(member) + i64(-1)
            + array([string(topic) + array([i32(0) + i64(offset) + string(metadata)])]))
    r = Reader(conn.request(OFFSET_COMMIT, 2, body))
    (topic_result,) = r.array(lambda r: (r.string(), r.array(lambda r: (r.i32(), r.i16()))))
    return topic_result[1][0][1]


def test_a_found_coordinator_serves_at_once(make_broker) -> None:
    """FindCoordinator creates the internal topics on a new broker; it names this broker only
    once the coordinator has taken the partition up, so the request a client sends next is
    served (Kafka answers COORDINATOR_NOT_AVAILABLE to the FindCoordinator that creates the
    topic). Strom used to answer at once, and the JoinGroup or InitProducerId that followed
    met NOT_COORDINATOR while the partition's log was still being made (seen with Kafka
    Connect and MirrorMaker 2)."""
    b = make_broker()
    with Conn(b.bootstrap) as conn:
        assert find_available(conn, "first-group") == 0
        assert join_v1(conn, "first-group")["error"] == NONE
        assert find_available(conn, "first-txn", key_type=1) == 0
        body = string("first-txn") + i32(60_000)  # InitProducerId v0
        r = Reader(conn.request(INIT_PRODUCER_ID, 0, body))
        r.i32()  # throttle
        assert r.i16() == NONE
        # The empty group id has a partition like any other: found, then refused by JoinGroup.
        assert find_available(conn, "") == 0
        assert join_v1(conn, "")["error"] == INVALID_GROUP_ID


def test_error_codes_on_raw_requests(broker, unique_topic):
    bs = broker.bootstrap
    topic = unique_topic("raw")
    kc.create_topic(bs, topic, 1)
    group = f"raw-{uuid.uuid4().hex[:8]}"
    with Conn(bs) as conn:
        assert find_available(conn, group) == 0
        assert find_available(conn, "txn", key_type=1) == 0  # transaction coordinator
        assert join_v1(conn, group, session=10)["error"] == INVALID_SESSION_TIMEOUT
        assert join_v1(conn, group, member="made-up")["error"] == UNKNOWN_MEMBER_ID
        joined = join_v1(conn, group)  # v1: no MEMBER_ID_REQUIRED round trip
        assert joined["error"] == NONE and joined["generation"] == 1
        assert joined["leader"] == joined["member"] and len(joined["members"]) == 1
        member, gen = joined["member"], joined["generation"]
        assert heartbeat_v0(conn, group, gen, member) == NONE  # awaiting the assignment
        assert sync_v0(conn, group, gen + 5, member, b"x") == ILLEGAL_GENERATION
        assert sync_v0(conn, group, gen, member, b"x") == NONE
        assert heartbeat_v0(conn, group, gen, member) == NONE
        assert heartbeat_v0(conn, group, gen + 1, member) == ILLEGAL_GENERATION
        assert heartbeat_v0(conn, group, gen, "stranger") == UNKNOWN_MEMBER_ID
        assert heartbeat_v0(conn, "no-such-group", 1, member) == UNKNOWN_MEMBER_ID
        assert commit_v2(conn, group, gen, member, topic, 1, "m" * 5000) == \
            OFFSET_METADATA_TOO_LARGE
        assert commit_v2(conn, group, gen + 1, member, topic, 1, "") == ILLEGAL_GENERATION
        assert commit_v2(conn, group, -1, "", topic, 1, "") == UNKNOWN_MEMBER_ID  # group active
        assert commit_v2(conn, group, gen, member, topic, 7, "ok") == NONE
        r = Reader(conn.request(DELETE_GROUPS, 0, array([string(group), string("nope-" + group)])))
        r.i32()
        assert r.array(lambda r: (r.string(), r.i16())) == [(group, NON_EMPTY_GROUP),
                                                          ("nope-" + group, GROUP_ID_NOT_FOUND)]
        r = Reader(conn.request(LEAVE_GROUP, 0, string(group) + string(member)))
        assert r.i16() == NONE
        r = Reader(conn.request(LEAVE_GROUP, 0, string(group) + string(member)))
        assert r.i16() == UNKNOWN_MEMBER_ID
        # v4 JoinGroup asks unknown members to come back with the id it hands out
        v4 = (string(group) + i32(6000) + i32(6000) + string("") + string("consumer")
              + array([string("range") + i32(0)]))
        r = Reader(conn.request(JOIN_GROUP, 4, v4))
        r.i32()
        assert r.i16() == MEMBER_ID_REQUIRED
        # the committed offset (and its metadata) is there; an unknown group has none
        body = string(group) + array([string(topic) + array([i32(0)])])
        r = Reader(conn.request(OFFSET_FETCH, 1, body))
        (t,) = r.array(lambda r: (r.string(), r.array(lambda r: (r.i32(), r.i64(), r.string(),
                                                                r.i16()))))
        assert t == (topic, [(0, 7, "ok", NONE)])
        body = string("nope-" + group) + array([string(topic) + array([i32(0)])])
        r = Reader(conn.request(OFFSET_FETCH, 1, body))
        (t,) = r.array(lambda r: (r.string(), r.array(lambda r: (r.i32(), r.i64(), r.string(),
                                                                r.i16()))))
        assert t == (topic, [(0, -1, "", NONE)])
        r = Reader(conn.request(DESCRIBE_GROUPS, 0, array([string("nope-" + group)])))
        (described,) = r.array(lambda r: (r.i16(), r.string(), r.string(), r.string(),
                                          r.string(), r.array(lambda r: r.string())))
        assert described == (NONE, "nope-" + group, "Dead", "", "", [])
    # the broker's own group records: Kafka's internal topic, compacted, 50 partitions
    md = kc.admin(bs).list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"]
    assert len(md.partitions) == 50


def _cstr(r: Reader) -> str | None:
    n = r.uvarint() - 1
    return None if n < 0 else r.raw(n).decode()


def _skip_tags(r: Reader) -> None:
    for _ in range(r.uvarint()):
        r.uvarint()
        r.raw(r.uvarint())


def _carray(r: Reader, item: Callable[[Reader], object]) -> list:
    return [item(r) for _ in range(r.uvarint() - 1)]


def test_batched_find_coordinator_and_multi_group_offset_fetch(broker, unique_topic):
    """FindCoordinator v4 (several keys) and OffsetFetch v8 (several groups), flexible versions."""
    from .wire import compact_string, uvarint

    bs = broker.bootstrap
    topic = unique_topic("multi")
    kc.create_topic(bs, topic, 2)
    g1, g2, g3 = (f"multi-{uuid.uuid4().hex[:8]}" for _ in range(3))
    for group, offset in ((g1, 3), (g2, 5)):
        c = group_consumer(bs, group)
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        c.close()
    with Conn(bs) as conn:
        body = b"\x00" + uvarint(4) + b"".join(compact_string(g) for g in (g1, g2, g3)) + b"\x00"
        r = Reader(conn.recv_response(conn.send(FIND_COORDINATOR, 4, body, flexible=True),
                                      flexible_header=True))
        r.i32()

        def coordinator(r: Reader) -> tuple:
            key, node, host, port, error = _cstr(r), r.i32(), _cstr(r), r.i32(), r.i16()
            _cstr(r)
            _skip_tags(r)
            return key, node, f"{host}:{port}", error

        assert _carray(r, coordinator) == [(g, 0, bs, NONE) for g in (g1, g2, g3)]
        topics = uvarint(2) + compact_string(topic) + uvarint(3) + i32(0) + i32(1) + b"\x00"
        groups = [compact_string(g) + topics + b"\x00" for g in (g1, g2)]
        groups.append(compact_string(g3) + b"\x00" + b"\x00")  # null topics: everything
        body = uvarint(4) + b"".join(groups) + b"\x00" + b"\x00"
        r = Reader(conn.recv_response(conn.send(OFFSET_FETCH, 8, body, flexible=True),
                                      flexible_header=True))
        r.i32()

        def partition(r: Reader) -> tuple:
            index, offset, _epoch, _meta, error = r.i32(), r.i64(), r.i32(), _cstr(r), r.i16()
            _skip_tags(r)
            return index, offset, error

        def topic_entry(r: Reader) -> tuple:
            name, parts = _cstr(r), _carray(r, partition)
            _skip_tags(r)
            return name, parts

        def group_entry(r: Reader) -> tuple:
            gid, ts, error = _cstr(r), _carray(r, topic_entry), None
            error = r.i16()
            _skip_tags(r)
            return gid, ts, error

        assert _carray(r, group_entry) == [
            (g1, [(topic, [(0, 3, NONE), (1, -1, NONE)])], NONE),
            (g2, [(topic, [(0, 5, NONE), (1, -1, NONE)])], NONE),
            (g3, [], NONE),
        ]
