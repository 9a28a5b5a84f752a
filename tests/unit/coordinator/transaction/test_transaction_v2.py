"""Transaction version 2 (KIP-890 part 2) in the coordinator: every EndTxn bumps the epoch.

The partition leaders add partitions on the producer's behalf (`client_tv=2`), EndTxn v5
answers with the epoch (or, once exhausted, the new producer id) the producer goes on with,
retries of an EndTxn are recognised by the epoch one below, and the state survives a restart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from strom.coordinator.transaction import records as rec
from strom.coordinator.transaction.coordinator import TxnConfig
from strom.coordinator.transaction.state import SHORT_MAX, TxnState
from strom.protocol.errors import ErrorCode as E

from .test_coordinator import Env, Markers, TxnTopic, init


@pytest.fixture
def env(tmp_path: Path, h: Any) -> Env:
    loop = h.FakeLoop()
    return Env(loop, TxnTopic(tmp_path, loop), Markers(),
               TxnConfig(state_partitions=3, max_timeout_ms=60000, abort_interval_ms=1000,
                         id_expiration_ms=3_600_000, expire_interval_ms=600_000,
                         marker_retry_backoff_ms=100))


def begin_v2(env: Env, tid: str, *partitions: tuple[str, int]) -> tuple[int, int]:
    r = init(env.coordinator, tid)
    assert r["error_code"] == 0, r
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert env.coordinator.add_partitions(tid, pid, epoch, list(partitions), client_tv=2) == 0
    return pid, epoch


def test_end_txn_v2_bumps_the_epoch_and_writes_markers_with_it(env: Env) -> None:
    c = env.coordinator
    pid, epoch = begin_v2(env, "a", ("t", 0), ("t", 1))
    code, new_pid, new_epoch = c.end_transaction_result("a", pid, epoch, True, client_tv=2)
    assert (code, new_pid, new_epoch) == (E.NONE, pid, epoch + 1)
    assert env.markers.written[-1].producer_epoch == epoch + 1
    md = c.transaction("a")
    assert md is not None and md.state == TxnState.COMPLETE_COMMIT
    assert md.producer_epoch == epoch + 1
    # the next transaction uses the bumped epoch; the old one is fenced
    assert c.add_partitions("a", pid, epoch, [("t", 0)], client_tv=2) == E.PRODUCER_FENCED
    assert c.add_partitions("a", pid, epoch + 1, [("t", 0)], client_tv=2) == E.NONE
    assert c.end_transaction_result("a", pid, epoch + 1, False, client_tv=2) == \
        (E.NONE, pid, epoch + 2)


def test_end_txn_v1_keeps_the_epoch(env: Env) -> None:
    c = env.coordinator
    r = init(c, "b")
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert c.add_partitions("b", pid, epoch, [("t", 0)]) == E.NONE
    assert c.end_transaction_result("b", pid, epoch, True) == (E.NONE, pid, epoch)
    assert env.markers.written[-1].producer_epoch == epoch


def test_a_retried_end_txn_v2_is_answered_with_the_bumped_epoch(env: Env) -> None:
    c = env.coordinator
    env.markers.hold = True
    pid, epoch = begin_v2(env, "r", ("t", 0))
    assert c.end_transaction_result("r", pid, epoch, True, client_tv=2) == \
        (E.NONE, pid, epoch + 1)
    # markers still in flight: the retry is told to wait
    assert c.end_transaction_result("r", pid, epoch, True, client_tv=2)[0] == \
        E.CONCURRENT_TRANSACTIONS
    env.markers.release()
    assert c.end_transaction_result("r", pid, epoch, True, client_tv=2) == \
        (E.NONE, pid, epoch + 1)
    # a retry asking the other outcome is refused; an epoch from before is fenced
    assert c.end_transaction_result("r", pid, epoch, False, client_tv=2)[0] == \
        E.INVALID_TXN_STATE
    assert c.end_transaction_result("r", pid, epoch - 1, True, client_tv=2)[0] == \
        E.PRODUCER_FENCED


def test_an_abort_with_nothing_added_still_bumps_the_epoch(env: Env) -> None:
    c = env.coordinator
    r = init(c, "e")
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert c.end_transaction_result("e", pid, epoch, False, client_tv=2) == \
        (E.NONE, pid, epoch + 1)
    md = c.transaction("e")
    assert md is not None and md.state == TxnState.COMPLETE_ABORT
    # a commit of nothing stays an error, as in Kafka
    assert c.end_transaction_result("e", pid, epoch + 1, True, client_tv=2)[0] == \
        E.INVALID_TXN_STATE


def test_an_exhausted_epoch_moves_to_a_new_producer_id(env: Env) -> None:
    c = env.coordinator
    pid, _ = begin_v2(env, "x", ("t", 0))
    md = c.transaction("x")
    assert md is not None
    md.producer_epoch = SHORT_MAX - 1  # as after 32,766 transactions
    code, new_pid, new_epoch = c.end_transaction_result("x", pid, SHORT_MAX - 1, True,
                                                        client_tv=2)
    assert code == E.NONE
    assert env.markers.written[-1].producer_id == pid  # markers close the old producer id
    assert env.markers.written[-1].producer_epoch == SHORT_MAX
    done = c.transaction("x")
    assert done is not None and done.state == TxnState.COMPLETE_COMMIT
    assert (done.producer_id, done.producer_epoch) == (new_pid, new_epoch) == \
        (done.producer_id, 0)
    assert new_pid != pid and done.previous_producer_id == pid
    # a retry with the old id and exhausted epoch is recognised
    assert c.end_transaction_result("x", pid, SHORT_MAX - 1, True, client_tv=2) == \
        (E.NONE, new_pid, 0)


def test_transaction_v2_state_survives_a_restart(env: Env) -> None:
    pid, epoch = begin_v2(env, "s", ("t", 2))
    env.markers.hold = True
    assert env.coordinator.end_transaction_result("s", pid, epoch, False, client_tv=2)[0] == 0
    values = [e.value for e in env.topic.entries(env.coordinator.partition_for("s"))]
    assert values[-1]["client_transaction_version"] == 2
    c = env.restart()
    md = c.transaction("s")
    assert md is not None and md.client_tv == 2 and md.producer_epoch == epoch + 1
    # the reloaded PrepareAbort is completed with the bumped epoch
    assert env.markers.written[-1].producer_epoch == epoch + 1


def test_tv2_values_are_written_as_version_1() -> None:
    value = rec.encode_value({"producer_id": 5, "producer_epoch": 1,
                              "transaction_timeout_ms": 10, "transaction_status": 0,
                              "transaction_partitions": None,
                              "transaction_last_update_timestamp_ms": 0,
                              "transaction_start_timestamp_ms": -1,
                              "next_producer_id": 9, "client_transaction_version": 2},
                             rec.TV2_VALUE_VERSION)
    entry = rec.decode(rec.encode_key("k"), value)
    assert entry.value is not None
    assert entry.value["next_producer_id"] == 9
    assert entry.value["client_transaction_version"] == 2
