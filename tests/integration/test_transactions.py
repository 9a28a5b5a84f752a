"""Transactions with real clients: confluent-kafka (librdkafka 2.16) and kafka-python 3.0.

Commit and abort against read_committed / read_uncommitted consumers, consume-transform-produce
with offsets committed in the transaction, zombie fencing, the LSO holding read_committed
consumers back, a broker killed with -9 in the middle of a transaction, and the operator views
(ListTransactions / DescribeTransactions through `strom transactions` and kafka-python's admin).

"Nothing else arrives" is checked with a sentinel written after the transaction under test:
a consumer that reads up to the sentinel has seen everything before it.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec

from . import clients as kc

pytestmark = pytest.mark.timeout(90)

OVERRIDES = {
    "group.initial.rebalance.delay.ms": 0,
    "transaction.state.log.num.partitions": 5,
    "offsets.topic.num.partitions": 5,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
}
STROM = Path(sys.executable).with_name("strom")


@pytest.fixture(scope="module")
def broker(make_module_broker):
    return make_module_broker(OVERRIDES)


# --------------------------------------------------------------------------- helpers


def txn_producer(bootstrap: str, tid: str, **conf: object) -> Producer:
    base = {"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5,
            "transaction.timeout.ms": 30000}
    base.update({k.replace("_", "."): v for k, v in conf.items()})
    p = Producer(base)
    p.init_transactions(30)
    return p


def read_until(bootstrap: str, topic: str, sentinel: bytes, *, committed: bool,
               partition: int = 0, timeout: float = 30.0) -> list[bytes]:
    """Values of one partition from the start up to and including `sentinel`."""
    c = kc.consumer(bootstrap, **{"isolation.level": "read_committed" if committed
                                  else "read_uncommitted"})
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        while sentinel not in out:
            if time.monotonic() > deadline:
                raise AssertionError(f"no sentinel {sentinel!r} within {timeout}s; got {out}")
            for m in c.consume(num_messages=100, timeout=0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(m.error())
                out.append(m.value())
        return out
    finally:
        c.close()


def plain_write(bootstrap: str, topic: str, value: bytes, partition: int = 0) -> None:
    p = kc.producer(bootstrap)
    kc.produce_with(p, topic, value, partition)


def offsets(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(last stable offset, high watermark) as ListOffsets reports them."""
    tp = TopicPartition(topic, partition)
    a = kc.admin(bootstrap)
    out = []
    for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        out.append(a.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level,
                                  request_timeout=20)[tp].result(20).offset)
    return out[0], out[1]


def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)  # poll interval, not synchronisation


def strom(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(STROM), *args], capture_output=True, text=True, timeout=60)


# --------------------------------------------------------------------------- commit / abort


def test_commit_is_visible_and_abort_is_not_confluent(broker, unique_topic):
    bs = broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, 2)
    p = txn_producer(bs, f"ca-{uuid.uuid4().hex[:6]}")
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, b"c%d" % i, partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, b"a%d" % i, partition=i % 2)
    p.flush(30)  # the aborted records really reach the log
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"end-0", partition=0)
    p.produce(topic, b"end-1", partition=1)
    p.commit_transaction(30)
    assert read_until(bs, topic, b"end-0", committed=True, partition=0) == [b"c0", b"c2",
                                                                           b"end-0"]
    assert read_until(bs, topic, b"end-1", committed=True, partition=1) == [b"c1", b"end-1"]
    assert read_until(bs, topic, b"end-0", committed=False, partition=0) == [
        b"c0", b"c2", b"a0", b"a2", b"end-0"]
    lso, hw = offsets(bs, topic, 0)
    assert lso == hw == 8  # 2 + marker, 2 + marker, 1 + marker


def test_commit_is_visible_and_abort_is_not_kafka_python(broker, unique_topic):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    bs = broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, 1)
    p = KafkaProducer(bootstrap_servers=bs, transactional_id=f"kp-{uuid.uuid4().hex[:6]}")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"c0")
        p.send(topic, b"c1")
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, b"a0")
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        p.send(topic, b"end")
        p.commit_transaction()
    finally:
        p.close(timeout=10)

    def kp_read(level: str) -> list[bytes]:
        c = KafkaConsumer(bootstrap_servers=bs, group_id=None, isolation_level=level,
                          auto_offset_reset="earliest", fetch_max_wait_ms=100)
        try:
            c.assign([KTP(topic, 0)])
            out: list[bytes] = []
            deadline = time.monotonic() + 30
            while b"end" not in out and time.monotonic() < deadline:
                for recs in c.poll(timeout_ms=500).values():
                    out += [r.value for r in recs]
            return out
        finally:
            c.close(autocommit=False)

    assert kp_read("read_committed") == [b"c0", b"c1", b"end"]
    assert kp_read("read_uncommitted") == [b"c0", b"c1", b"a0", b"end"]
    # and librdkafka's read_committed agrees with kafka-python's
    assert read_until(bs, topic, b"end", committed=True) == [b"c0", b"c1", b"end"]


# --------------------------------------------------------------------------- the LSO


def test_read_committed_consumer_stops_at_the_lso(broker, unique_topic):
    bs = broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, 1)
    plain_write(bs, topic, b"before")
    p = txn_producer(bs, f"lso-{uuid.uuid4().hex[:6]}")
    p.begin_transaction()
    p.produce(topic, b"t0")
    p.produce(topic, b"t1")
    p.flush(30)
    plain_write(bs, topic, b"after")  # written after the open transaction
    assert offsets(bs, topic) == (1, 4)  # LSO: the transaction's first offset
    c = kc.consumer(bs, **{"isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        assert [m.value for m in kc.poll_messages(c, 1)] == [b"before"]
        kc.assert_no_more(c, wait=1.5)  # "after" waits behind the transaction
        p.commit_transaction(30)
        assert [m.value for m in kc.poll_messages(c, 3)] == [b"t0", b"t1", b"after"]
    finally:
        c.close()
    assert offsets(bs, topic) == (5, 5)
    # read_uncommitted never waited
    assert read_until(bs, topic, b"after", committed=False) == [b"before", b"t0", b"t1",
                                                                b"after"]


# --------------------------------------------------------------------------- consume-transform-produce


def test_consume_transform_produce_confluent(broker, unique_topic):
    bs = broker.bootstrap
    src, dst = unique_topic("in"), unique_topic("out")
    kc.create_topic(bs, src, 1)
    kc.create_topic(bs, dst, 1)
    kc.produce(bs, src, [kc.Msg(None, b"m%d" % i) for i in range(6)])
    group = f"ctp-{uuid.uuid4().hex[:6]}"
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "session.timeout.ms": 6000})
    p = txn_producer(bs, f"ctp-{uuid.uuid4().hex[:6]}")
    tp = TopicPartition(src, 0)
    try:
        c.subscribe([src])

        def take(n: int) -> list[Any]:
            got: list[Any] = []
            deadline = time.monotonic() + 30
            while len(got) < n:
                assert time.monotonic() < deadline, f"got {len(got)} of {n}"
                m = c.poll(0.5)
                if m is not None and not m.error():
                    got.append(m)
            return got

        # round 1: 3 messages in, 3 out, offsets committed with the output
        p.begin_transaction()
        for m in take(3):
            p.produce(dst, m.value().upper())
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(),
                                      30)
        # while open, the group's offset is unstable: OffsetFetch with require_stable (what a
        # read_committed librdkafka consumer sends) answers UNSTABLE_OFFSET_COMMIT, retried
        # until the timeout, while a plain fetch gets the last stable value (none yet)
        with pytest.raises(KafkaException) as e:
            c.committed([tp], timeout=1.5)
        assert e.value.args[0].code() == KafkaError._TIMED_OUT
        plain = Consumer({"bootstrap.servers": bs, "group.id": group,
                          "isolation.level": "read_uncommitted"})
        try:
            assert plain.committed([tp], timeout=10)[0].offset < 0
        finally:
            plain.close()
        p.commit_transaction(30)
        assert c.committed([tp], timeout=10)[0].offset == 3
        # round 2: aborted, so neither the output nor the offsets count
        p.begin_transaction()
        for m in take(3):
            p.produce(dst, m.value().upper())
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(),
                                      30)
        p.flush(30)
        p.abort_transaction(30)
        assert c.committed([tp], timeout=10)[0].offset == 3
    finally:
        c.close()
    plain_write(bs, dst, b"sentinel")
    assert read_until(bs, dst, b"sentinel", committed=True) == [b"M0", b"M1", b"M2", b"sentinel"]


def test_consume_transform_produce_kafka_python(broker, unique_topic):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    bs = broker.bootstrap
    src, dst = unique_topic("in"), unique_topic("out")
    kc.create_topic(bs, src, 1)
    kc.create_topic(bs, dst, 1)
    kc.produce(bs, src, [kc.Msg(None, b"k%d" % i) for i in range(4)])
    group = f"kctp-{uuid.uuid4().hex[:6]}"
    c = KafkaConsumer(src, bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest", isolation_level="read_committed",
                      fetch_max_wait_ms=100)
    p = KafkaProducer(bootstrap_servers=bs, transactional_id=f"kctp-{uuid.uuid4().hex[:6]}")
    try:
        p.init_transactions()
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                got += recs
        assert [r.value for r in got] == [b"k0", b"k1", b"k2", b"k3"]
        p.begin_transaction()
        for r in got:
            p.send(dst, r.value.upper())
        p.send_offsets_to_transaction({KTP(src, 0): OffsetAndMetadata(4, "", -1)},
                                      c.group_metadata())
        p.commit_transaction()
        assert c.committed(KTP(src, 0)) == 4
    finally:
        p.close(timeout=10)
        c.close(autocommit=False)
    plain_write(bs, dst, b"sentinel")
    assert read_until(bs, dst, b"sentinel", committed=True) == [b"K0", b"K1", b"K2", b"K3",
                                                                b"sentinel"]


# --------------------------------------------------------------------------- zombie fencing


def test_zombie_producer_is_fenced_confluent(broker, unique_topic):
    bs = broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, 1)
    tid = f"zombie-{uuid.uuid4().hex[:6]}"
    old = txn_producer(bs, tid)
    old.begin_transaction()
    old.produce(topic, b"zombie-0")
    old.flush(30)
    new = txn_producer(bs, tid)  # aborts the old producer's open transaction, bumps the epoch
    old.produce(topic, b"zombie-1")
    with pytest.raises(KafkaException) as e:
        old.commit_transaction(30)
    assert e.value.args[0].fatal()  # fenced: the producer is unusable
    assert e.value.args[0].code() == KafkaError._FENCED
    new.begin_transaction()
    new.produce(topic, b"new")
    new.commit_transaction(30)
    assert read_until(bs, topic, b"new", committed=True) == [b"new"]
    assert b"zombie-0" in read_until(bs, topic, b"new", committed=False)


def test_zombie_producer_is_fenced_kafka_python(broker, unique_topic):
    from kafka import KafkaProducer
    from kafka.errors import InvalidProducerEpochError, ProducerFencedError
    from kafka.errors import KafkaError as KPError

    bs = broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, 1)
    tid = f"kzombie-{uuid.uuid4().hex[:6]}"
    old = KafkaProducer(bootstrap_servers=bs, transactional_id=tid)
    new = KafkaProducer(bootstrap_servers=bs, transactional_id=tid)
    try:
        old.init_transactions()
        old.begin_transaction()
        old.send(topic, b"zombie")
        old.flush()
        new.init_transactions()
        with pytest.raises((ProducerFencedError, InvalidProducerEpochError)):
            old.send(topic, b"zombie-2").get(timeout=30)
        # kafka-python then tries to bump its epoch (KIP-360), which the coordinator refuses
        # with PRODUCER_FENCED: from then on every transactional call fails with it
        def fenced() -> bool:
            try:
                old.commit_transaction()
            except KPError as e:  # before that: "invalid transition" (still bumping)
                return isinstance(e, ProducerFencedError) or "ProducerFenced" in str(e)
            raise AssertionError("the zombie committed")

        wait_for(fenced, 30, "the zombie to learn it is fenced")
        new.begin_transaction()
        new.send(topic, b"new")
        new.commit_transaction()
    finally:
        old.close(timeout=5)
        new.close(timeout=10)
    assert read_until(bs, topic, b"new", committed=True) == [b"new"]


# --------------------------------------------------------------------------- kill -9


def _coordinator_state(bs: str, tid: str) -> str | None:
    r = strom("transactions", "describe", tid, "-b", bs, "--timeout", "10")
    if r.returncode != 0:
        return None
    return next((state for state in ("CompleteAbort", "CompleteCommit", "Ongoing", "Empty",
                                     "PrepareCommit", "PrepareAbort")
                 if state in r.stdout), None)


def test_kill_9_mid_transaction_aborts_it_after_restart(make_broker, unique_topic):
    broker = make_broker(OVERRIDES)
    bs = broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, 2)
    tid = f"crash-{uuid.uuid4().hex[:6]}"
    # the timeout runs from the transaction's first partition: long enough that a loaded
    # machine does not abort it before the kill (seen in CI at 3 s), short enough to wait out
    p = txn_producer(bs, tid, **{"transaction.timeout.ms": 10000,
                                 "message.timeout.ms": 8000})
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, b"lost-%d" % i, partition=i % 2)
    p.flush(30)
    assert offsets(bs, topic, 0) == (0, 2)
    broker.restart(kill=True)
    del p
    # the coordinator reloads the Ongoing transaction and aborts it when its timeout passes
    wait_for(lambda: offsets(bs, topic, 0)[0] == offsets(bs, topic, 0)[1] == 3, 45,
             "the LSO to pass the abort marker")
    assert offsets(bs, topic, 1) == (3, 3)
    assert _coordinator_state(bs, tid) == "CompleteAbort"
    for part in (0, 1):
        plain_write(bs, topic, b"sentinel", part)
        assert read_until(bs, topic, b"sentinel", committed=True, partition=part) == [
            b"sentinel"]
        assert len(read_until(bs, topic, b"sentinel", committed=False, partition=part)) == 3


def test_kill_9_after_commit_and_takeover_after_restart(make_broker, unique_topic):
    broker = make_broker(OVERRIDES)
    bs = broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, 1)
    tid = f"crash2-{uuid.uuid4().hex[:6]}"
    p = txn_producer(bs, tid)  # 30 s timeout: only a new producer can end it quickly
    p.begin_transaction()
    p.produce(topic, b"kept")
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"open")
    p.flush(30)
    broker.restart(kill=True)
    del p
    assert _coordinator_state(bs, tid) == "Ongoing"  # durable, and not half-visible:
    assert offsets(bs, topic) == (2, 3)
    # a new incarnation of the producer aborts the open transaction and carries on
    q = txn_producer(bs, tid)
    q.begin_transaction()
    q.produce(topic, b"next")
    q.commit_transaction(30)
    assert read_until(bs, topic, b"next", committed=True) == [b"kept", b"next"]
    assert read_until(bs, topic, b"next", committed=False) == [b"kept", b"open", b"next"]


# --------------------------------------------------------------------------- broker-to-broker APIs


def test_batched_add_partitions_verification_and_write_txn_markers(broker, unique_topic):
    """The shapes a cluster uses between brokers, encoded by kafka-python's protocol classes:
    AddPartitionsToTxn v4+ (batched, verify_only) and WriteTxnMarkers."""
    from kafka.admin import KafkaAdminClient
    from kafka.protocol.producer.transaction import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnResponse,
        WriteTxnMarkersRequest,
        WriteTxnMarkersResponse,
    )

    from .wire import Conn

    bs = broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, 2)
    tid = f"b2b-{uuid.uuid4().hex[:6]}"
    p = txn_producer(bs, tid)
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)
    p.flush(30)
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        described = admin.describe_transactions([tid])[tid]
    finally:
        admin.close()
    pid, epoch = described.producer_id, described.producer_epoch

    def add(version: int, verify: bool, partitions: list[int], txn_epoch: int = epoch) -> dict:
        txn = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
        req = AddPartitionsToTxnRequest(version=version, transactions=[txn(
            transactional_id=tid, producer_id=pid, producer_epoch=txn_epoch, verify_only=verify,
            topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic,
                                                                      partitions=partitions)])])
        with Conn(bs) as conn:
            raw = conn.recv_response(conn.send(24, version, req.encode(version=version),
                                               flexible=True), flexible_header=True)
        resp = AddPartitionsToTxnResponse.decode(raw, version=version)
        assert resp.error_code == 0
        [result] = resp.results_by_transaction
        assert result.transactional_id == tid
        return {r.partition_index: r.partition_error_code
                for t in result.topic_results for r in t.results_by_partition}

    assert add(4, True, [0, 1]) == {0: 0, 1: 48}  # INVALID_TXN_STATE: 1 is not in it
    assert add(5, True, [1]) == {1: 120}  # TRANSACTION_ABORTABLE from v5
    assert add(4, True, [0], txn_epoch=epoch + 1) == {0: 90}  # PRODUCER_FENCED
    assert add(4, False, [1]) == {1: 0}  # a batched add
    assert add(4, True, [0, 1]) == {0: 0, 1: 0}

    # a coordinator elsewhere would send this to the partition leader
    marker = WriteTxnMarkersRequest.WritableTxnMarker
    req = WriteTxnMarkersRequest(version=1, markers=[marker(
        producer_id=pid, producer_epoch=epoch, transaction_result=False, coordinator_epoch=0,
        topics=[marker.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])])
    with Conn(bs) as conn:
        raw = conn.recv_response(conn.send(27, 1, req.encode(version=1), flexible=True),
                                 flexible_header=True)
    [result] = WriteTxnMarkersResponse.decode(raw, version=1).markers
    assert [(pt.partition_index, pt.error_code) for t in result.topics for pt in t.partitions] == [
        (0, 0)]
    assert offsets(bs, topic, 0) == (2, 2)  # the marker closed the transaction in partition 0
    p.abort_transaction(30)
    plain_write(bs, topic, b"sentinel")
    assert read_until(bs, topic, b"sentinel", committed=True) == [b"sentinel"]


# --------------------------------------------------------------------------- operator views


def test_list_and_describe_transactions(broker, unique_topic):
    from kafka.admin import KafkaAdminClient

    bs = broker.bootstrap
    topic = unique_topic()
    kc.create_topic(bs, topic, 1)
    tid = f"ops-{uuid.uuid4().hex[:6]}"
    p = txn_producer(bs, tid)
    p.begin_transaction()
    p.produce(topic, b"x")
    p.flush(30)
    try:
        r = strom("transactions", "list", "-b", bs, "--state", "Ongoing")
        assert r.returncode == 0, r.stderr
        row = next(line.split() for line in r.stdout.splitlines() if tid in line)
        assert row[0] == tid and row[1] == "0" and row[3] == "Ongoing"
        producer_id = int(row[2])
        r = strom("transactions", "describe", tid, "-b", bs)
        assert r.returncode == 0, r.stderr
        assert "Ongoing" in r.stdout and f"{topic}-0" in r.stdout
        r = strom("transactions", "list", "-b", bs, "--pattern", "ops-.*", "--duration-ms", "0")
        assert tid in r.stdout
        r = strom("transactions", "describe", "no-such-id", "-b", bs)
        assert r.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in r.stderr
        # kafka-python's admin client sees the same
        admin = KafkaAdminClient(bootstrap_servers=bs)
        try:
            listed = admin.list_transactions(producer_id_filters=[producer_id])
            states = [t for per_broker in listed.values() for t in per_broker]
            assert [t.transactional_id for t in states] == [tid]
            described = admin.describe_transactions([tid])[tid]
            assert described.state.value == "Ongoing" and described.producer_id == producer_id
            assert {(tp.topic, tp.partition) for tp in described.topic_partitions} == {(topic, 0)}
        finally:
            admin.close()
    finally:
        p.commit_transaction(30)
    assert _coordinator_state(bs, tid) == "CompleteCommit"
