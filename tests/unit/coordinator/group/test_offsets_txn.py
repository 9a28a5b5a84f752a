"""TxnOffsetCommit in the group coordinator: pending offsets per producer, made visible by the
COMMIT marker, dropped by ABORT, rebuilt from `__consumer_offsets` on load."""

from __future__ import annotations

from typing import Any

import pytest

from strom.protocol.errors import ErrorCode as E
from strom.protocol.errors import KafkaError
from strom.record import control_batch, iter_batches
from strom.storage.validator import ORIGIN_COORDINATOR

PID, EPOCH = 4242, 3


def txn_commit(c: Any, group: str, offsets: dict[tuple[str, int], int], *, pid: int = PID,
               epoch: int = EPOCH, member: str = "", generation: int = -1,
               instance: str | None = None) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list] = {}
    for (t, p), o in offsets.items():
        by_topic.setdefault(t, []).append((p, o, -1, "m"))
    result = c.offsets.commit_transactional_offsets(group, pid, epoch, member, generation, instance,
                                                    list(by_topic.items()))
    return {(t, p): code for t, rows in result for p, code in rows}


def fetched(c: Any, group: str, topics: list[tuple[str, list[int]]]) -> dict[tuple[str, int], int]:
    rows = c.offsets.fetch_offsets(group, topics)
    return {(t, p): off for t, parts in rows for p, off, _, _ in parts}


def write_marker(env: Any, group: str, commit: bool, pid: int = PID) -> None:
    """A COMMIT/ABORT marker in the group's `__consumer_offsets` partition, as the transaction
    coordinator writes it, followed by the notification the broker sends."""
    c = env.coordinator
    partition = c.partition_for(group)
    log = env.offsets.logs[partition]
    batch = control_batch(commit=commit, producer_id=pid, producer_epoch=EPOCH,
                          coordinator_epoch=0, timestamp=env.loop.now_ms())
    log.append(memoryview(bytearray(batch)), leader_epoch=0, now_ms=env.loop.now_ms(),
               origin=ORIGIN_COORDINATOR)
    c.offsets.on_transaction_completed(partition, pid, commit)


def test_offsets_count_only_after_the_commit_marker(env: Any) -> None:
    c = env.coordinator
    assert txn_commit(c, "g", {("t", 0): 10, ("t", 1): 20}) == {("t", 0): 0, ("t", 1): 0}
    assert fetched(c, "g", [("t", [0, 1])]) == {("t", 0): -1, ("t", 1): -1}
    assert c.offsets.unstable_offsets("g") == {("t", 0), ("t", 1)}
    assert c.offsets.unstable_offsets("other") == set()
    write_marker(env, "g", commit=True)
    assert fetched(c, "g", [("t", [0, 1])]) == {("t", 0): 10, ("t", 1): 20}
    assert c.offsets.unstable_offsets("g") == set()


def test_abort_marker_drops_the_offsets(env: Any) -> None:
    c = env.coordinator
    c.offsets.commit_offsets("g", -1, "", None, -1, [("t", [(0, 5, -1, None)])], 8)
    txn_commit(c, "g", {("t", 0): 99})
    write_marker(env, "g", commit=False)
    assert fetched(c, "g", [("t", [0])]) == {("t", 0): 5}
    assert c.offsets.unstable_offsets("g") == set()


def test_the_batch_is_transactional(env: Any) -> None:
    c = env.coordinator
    txn_commit(c, "g", {("t", 0): 1})
    log = env.offsets.logs[c.partition_for("g")]
    data = log.read(0, 1 << 20).slice.read_bytes()
    [(_, header)] = list(iter_batches(data))
    assert header.is_transactional and header.producer_id == PID
    assert header.producer_epoch == EPOCH


def test_pending_and_completed_offsets_survive_a_restart(env: Any) -> None:
    c = env.coordinator
    txn_commit(c, "done", {("t", 0): 7})
    write_marker(env, "done", commit=True)
    txn_commit(c, "gone", {("t", 0): 8}, pid=PID + 1)
    write_marker(env, "gone", commit=False, pid=PID + 1)
    txn_commit(c, "open", {("t", 0): 9}, pid=PID + 2)
    c = env.restart()
    assert fetched(c, "done", [("t", [0])]) == {("t", 0): 7}
    assert fetched(c, "gone", [("t", [0])]) == {("t", 0): -1}
    assert fetched(c, "open", [("t", [0])]) == {("t", 0): -1}
    assert c.offsets.unstable_offsets("open") == {("t", 0)}
    # the marker may land after the restart, too
    write_marker(env, "open", commit=True, pid=PID + 2)
    assert fetched(c, "open", [("t", [0])]) == {("t", 0): 9}


def test_marker_written_while_the_partition_loads_is_replayed(env: Any) -> None:
    c = env.coordinator
    txn_commit(c, "g", {("t", 0): 3})
    partition = c.partition_for("g")
    c.on_leadership(partition, False)
    c.on_leadership(partition, True, 1)
    assert c.is_loading(partition)
    write_marker(env, "g", commit=True)  # the notification is ignored: the replay sees it
    env.loop.advance(0)
    assert not c.is_loading(partition)
    assert fetched(c, "g", [("t", [0])]) == {("t", 0): 3}


def test_validation_against_the_group(env: Any, h: Any) -> None:
    c = env.coordinator
    first = h.Reply()
    c.classic.join_group(h.join_req("grp"), first)
    mid = first.value.member_id
    join = h.Reply()
    c.classic.join_group(h.join_req("grp", mid), join)
    env.loop.advance(0)
    sync = h.Reply()
    c.classic.sync_group("grp", 1, mid, None, None, None, [(mid, b"a")], sync)
    assert sync.value.error_code == 0
    # old TxnOffsetCommit versions carry no member: accepted into a group with members
    assert txn_commit(c, "grp", {("t", 0): 1}) == {("t", 0): 0}
    assert txn_commit(c, "grp", {("t", 0): 2}, member=mid, generation=1) == {("t", 0): 0}
    with pytest.raises(KafkaError) as e:
        txn_commit(c, "grp", {("t", 0): 3}, member=mid, generation=5)
    assert e.value.code == E.ILLEGAL_GENERATION
    with pytest.raises(KafkaError) as e:
        txn_commit(c, "grp", {("t", 0): 3}, member="stranger", generation=1)
    assert e.value.code == E.UNKNOWN_MEMBER_ID
    with pytest.raises(KafkaError) as e:
        txn_commit(c, "missing", {("t", 0): 3}, generation=2)
    assert e.value.code == E.ILLEGAL_GENERATION
    long_meta = [("t", [(0, 1, -1, "x" * 5000)])]
    result = c.offsets.commit_transactional_offsets("grp", PID, EPOCH, "", -1, None, long_meta)
    assert result == [("t", [(0, E.OFFSET_METADATA_TOO_LARGE)])]


def test_a_fenced_producer_epoch_is_refused_by_the_log(env: Any) -> None:
    c = env.coordinator
    txn_commit(c, "g", {("t", 0): 1}, epoch=5)
    with pytest.raises(KafkaError) as e:
        txn_commit(c, "g", {("t", 0): 2}, epoch=4)
    assert e.value.code == E.INVALID_PRODUCER_EPOCH
