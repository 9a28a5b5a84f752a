"""The transaction coordinator on a fake clock, persisting to real partition logs."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from strom.coordinator.transaction import records as rec
from strom.coordinator.transaction.coordinator import TransactionCoordinator, TxnConfig
from strom.coordinator.transaction.markers import MarkerResults, TxnMarker
from strom.coordinator.transaction.state import TxnState
from strom.protocol.errors import ErrorCode as E
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog

TOPIC_ID = uuid.UUID(int=11)
PARTITIONS = 3


class TxnTopic:
    """`__transaction_state` over real PartitionLogs in a temp dir."""

    def __init__(self, base: Path, loop: Any) -> None:
        self.base = base
        self.loop = loop
        self.logs: dict[int, PartitionLog] = {p: self._open(p) for p in range(PARTITIONS)}
        self.led = set(range(PARTITIONS))

    def _open(self, p: int) -> PartitionLog:
        return PartitionLog(self.base / f"__transaction_state-{p}", "__transaction_state", p,
                            TOPIC_ID, LogConfig(cleanup_policy="compact"),
                            clock=lambda: self.loop.now / 1000)

    def num_partitions(self) -> int | None:
        return PARTITIONS

    def create(self) -> int:
        return PARTITIONS

    def log(self, partition: int) -> Any:
        return self.logs.get(partition) if partition in self.led else None

    def leader_epoch(self, partition: int) -> int:
        return 0

    def reopen(self) -> None:
        for p, log in list(self.logs.items()):
            log.close()
            self.logs[p] = self._open(p)

    def entries(self, partition: int) -> list[rec.TxnLogEntry]:
        return [e for chunk in _store(self).replay(partition) for e in chunk]


def _store(topic: TxnTopic) -> Any:
    from strom.coordinator.transaction.store import TxnStore

    return TxnStore(topic, lambda: 0)


@dataclass
class Markers:
    """A MarkerWriter that records markers; `answer` decides each partition's result, `hold`
    keeps the callbacks for the test to release."""

    written: list[TxnMarker] = field(default_factory=list)
    answer: Callable[[TxnMarker, tuple[str, int]], int] = lambda m, tp: E.NONE
    hold: bool = False
    held: list[tuple[TxnMarker, Callable[[MarkerResults], None]]] = field(default_factory=list)

    def write(self, marker: TxnMarker, done: Callable[[MarkerResults], None]) -> None:
        self.written.append(marker)
        if self.hold:
            self.held.append((marker, done))
            return
        done({tp: self.answer(marker, tp) for tp in marker.partitions})

    def release(self) -> None:
        held, self.held = self.held, []
        for marker, done in held:
            done(dict.fromkeys(marker.partitions, E.NONE))


@dataclass
class Env:
    loop: Any
    topic: TxnTopic
    markers: Markers
    config: TxnConfig
    next_pid: list[int] = field(default_factory=lambda: [1000])
    coordinator: TransactionCoordinator = field(init=False)

    def __post_init__(self) -> None:
        self.coordinator = self.new()

    def allocate(self) -> int:
        self.next_pid[0] += 1
        return self.next_pid[0] - 1

    def new(self, *, load: bool = True) -> TransactionCoordinator:
        c = TransactionCoordinator(self.config, self.topic, self.markers, self.allocate,
                                   self.loop, self.loop.now_ms)
        for p in self.topic.led:
            c.on_leadership(p, True, 7)
        if load:
            self.loop.advance(0)
        return c

    def restart(self, *, load: bool = True) -> TransactionCoordinator:
        self.coordinator.shutdown()
        self.topic.reopen()
        self.coordinator = self.new(load=load)
        return self.coordinator


@pytest.fixture
def env(tmp_path: Path, h: Any) -> Env:
    loop = h.FakeLoop()
    return Env(loop, TxnTopic(tmp_path, loop), Markers(),
               TxnConfig(state_partitions=PARTITIONS, max_timeout_ms=60000,
                         abort_interval_ms=1000, id_expiration_ms=3_600_000,
                         expire_interval_ms=600_000, marker_retry_backoff_ms=100))


def init(c: TransactionCoordinator, tid: str, timeout: int = 10000, pid: int | None = None,
         epoch: int = -1) -> dict[str, Any]:
    return c.init_producer_id(tid, timeout, pid, epoch)


def start_txn(env: Env, tid: str, *partitions: tuple[str, int]) -> tuple[int, int]:
    r = init(env.coordinator, tid)
    assert r["error_code"] == 0, r
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert env.coordinator.add_partitions(tid, pid, epoch, list(partitions)) == E.NONE
    return pid, epoch


# ------------------------------------------------------------------------------- InitProducerId


def test_init_allocates_a_producer_id_and_bumps_the_epoch_on_reinit(env: Env) -> None:
    c = env.coordinator
    first = init(c, "app")
    assert first == {"error_code": 0, "producer_id": 1000, "producer_epoch": 0}
    again = init(c, "app")
    assert again == {"error_code": 0, "producer_id": 1000, "producer_epoch": 1}
    other = init(c, "other")
    assert other["producer_id"] == 1001
    md = c.transaction("app")
    assert md is not None and md.state == TxnState.EMPTY and md.timeout_ms == 10000
    # durable: a new coordinator over the same logs knows the id and keeps bumping
    c = env.restart()
    assert init(c, "app") == {"error_code": 0, "producer_id": 1000, "producer_epoch": 2}


def test_init_validates_timeout_and_id(env: Env) -> None:
    c = env.coordinator
    assert init(c, "t", timeout=0)["error_code"] == E.INVALID_TRANSACTION_TIMEOUT
    assert init(c, "t", timeout=60001)["error_code"] == E.INVALID_TRANSACTION_TIMEOUT
    assert init(c, "t", timeout=60000)["error_code"] == E.NONE
    assert init(c, "")["error_code"] == E.INVALID_REQUEST


def test_not_coordinator_and_load_in_progress(env: Env) -> None:
    c = env.coordinator
    init(c, "x")
    p = c.partition_for("x")
    c.on_leadership(p, False)
    assert init(c, "x")["error_code"] == E.NOT_COORDINATOR
    c.on_leadership(p, True, 8)  # the replay continues on the loop
    assert init(c, "x")["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS
    assert c.describe_transactions(["x"])[0]["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS
    assert c.list_transactions()["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS
    env.loop.advance(0)
    assert init(c, "x")["error_code"] == E.NONE


def test_kip360_expected_producer_id_and_epoch(env: Env) -> None:
    c = env.coordinator
    r = init(c, "k")
    pid = r["producer_id"]
    bumped = init(c, "k", pid=pid, epoch=0)
    assert bumped == {"error_code": 0, "producer_id": pid, "producer_epoch": 1}
    # the response was lost and the producer retries with its old epoch: same answer
    assert init(c, "k", pid=pid, epoch=0) == bumped
    assert init(c, "k", pid=pid + 50, epoch=1)["error_code"] == E.PRODUCER_FENCED
    assert init(c, "k", pid=pid, epoch=7)["error_code"] == E.PRODUCER_FENCED


def test_exhausted_epoch_rotates_the_producer_id(env: Env) -> None:
    c = env.coordinator
    init(c, "old")
    shard = c.shards[c.partition_for("old")]
    shard.txns["old"].producer_epoch = 32766
    r = init(c, "old")
    assert r["producer_id"] != 1000 and r["producer_epoch"] == 0


# ------------------------------------------------------------------------- partitions and EndTxn


def test_add_partitions_errors_and_state(env: Env) -> None:
    c = env.coordinator
    assert c.add_partitions("nobody", 1, 0, [("t", 0)]) == E.INVALID_PRODUCER_ID_MAPPING
    r = init(c, "a")
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert c.add_partitions("a", pid + 1, epoch, [("t", 0)]) == E.INVALID_PRODUCER_ID_MAPPING
    assert c.add_partitions("a", pid, epoch + 1, [("t", 0)]) == E.PRODUCER_FENCED
    env.loop.advance(5)
    assert c.add_partitions("a", pid, epoch, [("t", 0), ("t", 1)]) == E.NONE
    md = c.transaction("a")
    assert md is not None and md.state == TxnState.ONGOING
    assert md.partitions == {("t", 0), ("t", 1)} and md.start_ms == env.loop.now_ms()
    logged = len(env.topic.entries(c.partition_for("a")))
    assert c.add_partitions("a", pid, epoch, [("t", 1)]) == E.NONE  # already in: no record
    assert len(env.topic.entries(c.partition_for("a"))) == logged
    assert c.add_partitions("a", pid, epoch, [("u", 0)]) == E.NONE
    assert c.transaction("a").partitions == {("t", 0), ("t", 1), ("u", 0)}  # type: ignore[union-attr]


def test_commit_writes_markers_everywhere_then_completes(env: Env) -> None:
    c = env.coordinator
    pid, epoch = start_txn(env, "c", ("t", 0), ("t", 1), ("__consumer_offsets", 2))
    assert c.end_transaction("c", pid, epoch, True) == E.NONE
    [marker] = env.markers.written
    assert marker.commit and marker.producer_id == pid and marker.producer_epoch == epoch
    assert marker.coordinator_epoch == 7
    assert set(marker.partitions) == {("t", 0), ("t", 1), ("__consumer_offsets", 2)}
    md = c.transaction("c")
    assert md is not None and md.state == TxnState.COMPLETE_COMMIT and not md.partitions
    states = [e.value["transaction_status"] for e in env.topic.entries(c.partition_for("c"))]
    assert states == [0, 1, 2, 4]  # Empty, Ongoing, PrepareCommit, CompleteCommit
    # a retried commit succeeds, an abort now is invalid
    assert c.end_transaction("c", pid, epoch, True) == E.NONE
    assert c.end_transaction("c", pid, epoch, False) == E.INVALID_TXN_STATE
    # and the next transaction can start
    assert c.add_partitions("c", pid, epoch, [("t", 0)]) == E.NONE


def test_end_txn_errors(env: Env) -> None:
    c = env.coordinator
    r = init(c, "e")
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert c.end_transaction("e", pid, epoch, True) == E.INVALID_TXN_STATE  # nothing open
    assert c.end_transaction("zz", pid, epoch, True) == E.INVALID_PRODUCER_ID_MAPPING
    c.add_partitions("e", pid, epoch, [("t", 0)])
    assert c.end_transaction("e", pid, epoch - 1, True) == E.PRODUCER_FENCED
    assert c.end_transaction("e", pid + 1, epoch, True) == E.INVALID_PRODUCER_ID_MAPPING
    assert c.end_transaction("e", pid, epoch, False) == E.NONE
    assert c.transaction("e").state == TxnState.COMPLETE_ABORT  # type: ignore[union-attr]
    assert not env.markers.written[0].commit


def test_requests_wait_while_markers_are_in_flight(env: Env) -> None:
    c = env.coordinator
    env.markers.hold = True
    pid, epoch = start_txn(env, "w", ("t", 0))
    assert c.end_transaction("w", pid, epoch, True) == E.NONE  # answered after PrepareCommit
    assert c.transaction("w").state == TxnState.PREPARE_COMMIT  # type: ignore[union-attr]
    assert c.add_partitions("w", pid, epoch, [("t", 1)]) == E.CONCURRENT_TRANSACTIONS
    assert c.end_transaction("w", pid, epoch, True) == E.CONCURRENT_TRANSACTIONS
    assert c.end_transaction("w", pid, epoch, False) == E.CONCURRENT_TRANSACTIONS
    assert init(c, "w")["error_code"] == E.CONCURRENT_TRANSACTIONS
    assert c.verify_partitions("w", pid, epoch, [("t", 0)]) == {("t", 0): E.CONCURRENT_TRANSACTIONS}
    env.markers.release()
    assert c.transaction("w").state == TxnState.COMPLETE_COMMIT  # type: ignore[union-attr]
    assert init(c, "w")["producer_epoch"] == epoch + 1


def test_failed_markers_are_retried_with_backoff(env: Env) -> None:
    c = env.coordinator
    failures = {"n": 2}

    def answer(marker: TxnMarker, tp: tuple[str, int]) -> int:
        if tp == ("t", 1) and failures["n"]:
            failures["n"] -= 1
            return E.NOT_LEADER_OR_FOLLOWER
        return E.UNKNOWN_TOPIC_OR_PARTITION if tp == ("gone", 0) else E.NONE

    env.markers.answer = answer
    pid, epoch = start_txn(env, "r", ("t", 0), ("t", 1), ("gone", 0))
    assert c.end_transaction("r", pid, epoch, False) == E.NONE
    assert c.transaction("r").state == TxnState.PREPARE_ABORT  # type: ignore[union-attr]
    assert c.transaction("r").partitions == {("t", 1)}  # type: ignore[union-attr]
    env.loop.advance(99)
    assert len(env.markers.written) == 1
    env.loop.advance(1)  # first retry after 100 ms fails again, the next waits 200 ms
    assert len(env.markers.written) == 2 and env.markers.written[1].partitions == (("t", 1),)
    env.loop.advance(200)
    assert c.transaction("r").state == TxnState.COMPLETE_ABORT  # type: ignore[union-attr]


def test_verify_partitions(env: Env) -> None:
    c = env.coordinator
    pid, epoch = start_txn(env, "v", ("t", 0))
    assert c.verify_partitions("v", pid, epoch, [("t", 0), ("t", 1)]) == {
        ("t", 0): E.NONE, ("t", 1): E.TRANSACTION_ABORTABLE}
    assert c.verify_partitions("v", pid, epoch + 1, [("t", 0)]) == {("t", 0): E.PRODUCER_FENCED}
    assert c.verify_partitions("v", pid + 9, epoch, [("t", 0)]) == {
        ("t", 0): E.INVALID_PRODUCER_ID_MAPPING}
    c.on_leadership(c.partition_for("v"), False)
    assert c.verify_partitions("v", pid, epoch, [("t", 0)]) == {("t", 0): E.NOT_COORDINATOR}


# ----------------------------------------------------------------------- fencing and timeouts


def test_new_producer_fences_the_open_transaction(env: Env) -> None:
    c = env.coordinator
    pid, epoch = start_txn(env, "z", ("t", 0), ("t", 1))
    r = init(c, "z")
    assert r["error_code"] == E.CONCURRENT_TRANSACTIONS  # abort first, client retries
    [marker] = env.markers.written
    assert not marker.commit and marker.producer_epoch == epoch + 1  # the zombie is fenced
    assert c.transaction("z").state == TxnState.COMPLETE_ABORT  # type: ignore[union-attr]
    r = init(c, "z")
    assert r == {"error_code": 0, "producer_id": pid, "producer_epoch": epoch + 2}
    # the old producer's next operations are refused
    assert c.add_partitions("z", pid, epoch, [("t", 2)]) == E.PRODUCER_FENCED
    assert c.end_transaction("z", pid, epoch, True) == E.PRODUCER_FENCED


def test_timed_out_transaction_is_aborted_with_a_bumped_epoch(env: Env) -> None:
    c = env.coordinator
    c.start()
    pid, epoch = start_txn(env, "slow", ("t", 0))  # timeout 10 s; checked every second
    env.loop.advance(9000)
    assert c.transaction("slow").state == TxnState.ONGOING  # type: ignore[union-attr]
    env.loop.advance(2000)
    md = c.transaction("slow")
    assert md is not None and md.state == TxnState.COMPLETE_ABORT
    assert md.producer_epoch == epoch + 1
    [marker] = env.markers.written
    assert not marker.commit and marker.producer_epoch == epoch + 1
    assert c.end_transaction("slow", pid, epoch, True) == E.PRODUCER_FENCED
    c.shutdown()


# ------------------------------------------------------------------------------ durability


def test_restart_completes_a_logged_commit(env: Env) -> None:
    """kill -9 after PrepareCommit was logged: the next coordinator writes the markers."""
    env.markers.hold = True  # the markers never get written before the "crash"
    pid, epoch = start_txn(env, "crash", ("t", 0), ("t", 3))
    env.coordinator.end_transaction("crash", pid, epoch, True)
    env.markers = Markers()
    c = env.restart()
    md = c.transaction("crash")
    assert md is not None and md.state == TxnState.COMPLETE_COMMIT
    [marker] = env.markers.written
    assert marker.commit and set(marker.partitions) == {("t", 0), ("t", 3)}
    assert marker.producer_epoch == epoch


def test_restart_aborts_an_open_transaction_after_its_timeout(env: Env) -> None:
    start_txn(env, "open", ("t", 0))
    c = env.restart()
    c.start()
    md = c.transaction("open")
    assert md is not None and md.state == TxnState.ONGOING and md.partitions == {("t", 0)}
    env.loop.advance(11000)
    assert c.transaction("open").state == TxnState.COMPLETE_ABORT  # type: ignore[union-attr]
    assert not env.markers.written[0].commit
    c.shutdown()


def test_transactional_ids_expire(env: Env) -> None:
    c = env.coordinator
    init(c, "idle")
    start_txn(env, "busy", ("t", 0))
    env.loop.advance(3_600_001)
    assert c.expire_transactional_ids() == 1  # an open transaction never expires
    assert c.transaction("idle") is None and c.transaction("busy") is not None
    c = env.restart()
    assert c.transaction("idle") is None
    assert c.describe_transactions(["idle"])[0]["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND


# ---------------------------------------------------------------------------- describe / list


def test_describe_and_list(env: Env) -> None:
    c = env.coordinator
    pid, epoch = start_txn(env, "d1", ("t", 1), ("t", 0), ("u", 0))
    init(c, "d2")
    [d] = c.describe_transactions(["d1"])
    assert d["error_code"] == 0 and d["transaction_state"] == "Ongoing"
    assert d["producer_id"] == pid and d["producer_epoch"] == epoch
    assert d["transaction_timeout"] == 10000 and d["transaction_start_time"] == env.loop.now_ms()
    assert d["topics"] == [{"topic": "t", "partitions": [0, 1]}, {"topic": "u", "partitions": [0]}]
    assert c.describe_transactions(["nope"])[0]["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND
    assert c.describe_transactions([""])[0]["error_code"] == E.INVALID_REQUEST

    def ids(**kw: Any) -> list[str]:
        result = c.list_transactions(**kw)
        assert result["error_code"] == 0
        return [t["transactional_id"] for t in result["transaction_states"]]

    assert ids() == ["d1", "d2"]
    assert ids(states=["Ongoing"]) == ["d1"]
    assert ids(producer_ids=[pid]) == ["d1"]
    assert ids(pattern="d[0-9]") == ["d1", "d2"] and ids(pattern="d") == []
    env.loop.advance(500)
    assert ids(states=["Ongoing"], duration_ms=100) == ["d1"]
    assert ids(states=["Ongoing"], duration_ms=1000) == []
    odd = c.list_transactions(states=["Weird"])
    assert odd["unknown_state_filters"] == ["Weird"] and odd["transaction_states"] == []


# -------------------------------------------------------------------------------- records


def test_record_layout_is_kafkas() -> None:
    key = rec.encode_key("tx")
    assert key == b"\x00\x00" + b"\x00\x02tx"
    value = rec.encode_value({
        "producer_id": 5, "producer_epoch": 1, "transaction_timeout_ms": 60000,
        "transaction_status": 1,
        "transaction_partitions": rec.partitions_field({("a", 1), ("a", 0)}),
        "transaction_last_update_timestamp_ms": 3, "transaction_start_timestamp_ms": 2})
    expected = (b"\x00\x00"  # value version 0
                + (5).to_bytes(8, "big") + (1).to_bytes(2, "big") + (60000).to_bytes(4, "big")
                + b"\x01"  # Ongoing
                + (1).to_bytes(4, "big") + b"\x00\x01a" + (2).to_bytes(4, "big")
                + (0).to_bytes(4, "big") + (1).to_bytes(4, "big")
                + (3).to_bytes(8, "big") + (2).to_bytes(8, "big"))
    assert value == expected
    empty = rec.encode_value({"producer_id": 5, "producer_epoch": 0, "transaction_timeout_ms": 1,
                              "transaction_status": 0, "transaction_partitions": None,
                              "transaction_last_update_timestamp_ms": 0,
                              "transaction_start_timestamp_ms": -1})
    assert empty[2 + 8 + 2 + 4 + 1:][:4] == b"\xff\xff\xff\xff"  # Empty: a null array
    # version 1 (flexible, tagged fields) decodes too
    v1 = rec.encode_value({"producer_id": 9, "previous_producer_id": 8, "producer_epoch": 3,
                           "transaction_timeout_ms": 1000, "transaction_status": 4,
                           "transaction_partitions": [],
                           "transaction_last_update_timestamp_ms": 7,
                           "transaction_start_timestamp_ms": 6}, version=1)
    entry = rec.decode(key, v1)
    assert entry.transactional_id == "tx" and entry.value["previous_producer_id"] == 8  # type: ignore[index]
    assert rec.decode(key, None).value is None
    with pytest.raises(rec.UnknownKeyVersion):
        rec.decode(b"\x00\x05\x00\x01x", v1)


# ------------------------------------------------------------------- replication (a cluster)


def _replicated(env: Env) -> tuple[Any, TransactionCoordinator]:
    """The coordinator of `env` as a cluster's: its state partitions' replication held."""
    from strom.coordinator.runtime.commits import Commits

    from ..runtime.fakes import HeldReplication

    replication = HeldReplication()
    env.coordinator.store.commits = Commits(replication)
    return replication, env.coordinator


def test_markers_wait_until_prepare_commit_is_replicated(env: Env) -> None:
    """A marker written before PrepareCommit is committed could commit partitions of a
    transaction that a successor coordinator, which never saw PrepareCommit, aborts."""
    async def scenario() -> None:
        replication, c = _replicated(env)
        pid, epoch = start_txn(env, "app", ("t", 0), ("t", 1))
        partition = c.partition_for("app")
        topic = "__transaction_state"
        assert c.end_transaction("app", pid, epoch, commit=True) == E.NONE
        prepared = env.topic.logs[partition].log_end_offset
        await asyncio.sleep(0)
        assert env.markers.written == []  # PrepareCommit is only on the leader so far
        assert c.transaction("app").state == TxnState.PREPARE_COMMIT
        replication.commit(topic, partition, prepared - 1)
        await asyncio.sleep(0)
        assert env.markers.written == []
        replication.commit(topic, partition, prepared)
        for _ in range(5):
            await asyncio.sleep(0)
        assert [m.partitions for m in env.markers.written] == [(("t", 0), ("t", 1))]
        assert c.transaction("app").state == TxnState.COMPLETE_COMMIT

    asyncio.run(scenario())


def test_a_lost_leadership_leaves_the_markers_to_the_next_coordinator(env: Env) -> None:
    async def scenario() -> None:
        replication, c = _replicated(env)
        pid, epoch = start_txn(env, "app", ("t", 0))
        assert c.end_transaction("app", pid, epoch, commit=True) == E.NONE
        await asyncio.sleep(0)
        replication.fail(E.NOT_LEADER_OR_FOLLOWER)
        for _ in range(5):
            await asyncio.sleep(0)
        assert env.markers.written == []
        env.loop.advance(60_000)  # no retry either: the new leader completes it on load
        assert env.markers.written == []

    asyncio.run(scenario())


def test_a_slow_replica_set_delays_the_markers_it_does_not_drop_them(env: Env) -> None:
    async def scenario() -> None:
        replication, c = _replicated(env)
        pid, epoch = start_txn(env, "app", ("t", 0))
        partition = c.partition_for("app")
        assert c.end_transaction("app", pid, epoch, commit=False) == E.NONE
        await asyncio.sleep(0)
        replication.fail(E.REQUEST_TIMED_OUT)
        for _ in range(5):
            await asyncio.sleep(0)
        assert env.markers.written == []
        replication.fail_with = E.NONE
        replication.commit("__transaction_state", partition,
                           env.topic.logs[partition].log_end_offset)
        env.loop.advance(100)  # the retry waits again, and this time it is committed
        for _ in range(5):
            await asyncio.sleep(0)
        assert [m.commit for m in env.markers.written] == [False]

    asyncio.run(scenario())
