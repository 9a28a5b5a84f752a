"""The runtime's commit waits: what a request touched, waiting for it, the one error map."""

from __future__ import annotations

import asyncio

import pytest

from strom.coordinator.runtime.commits import Commits, touch, tracking
from strom.coordinator.runtime.errors import append_error, coordinator_error
from strom.protocol.errors import ErrorCode as E
from strom.storage.errors import StorageError

from .fakes import HeldReplication

T = "__consumer_offsets"


def test_touches_are_collected_only_inside_tracking() -> None:
    touch(T, 1)  # no request: nobody collects
    with tracking() as touched:
        touch(T, 2)
        touch("__transaction_state", 0)
        with tracking() as inner:
            touch(T, 3)
        touch(T, 2)
    assert touched == {(T, 2), ("__transaction_state", 0)}
    assert inner == {(T, 3)}


def test_touches_from_awaited_code_are_collected() -> None:
    async def request() -> set[tuple[str, int]]:
        async def later() -> None:
            await asyncio.sleep(0)
            touch(T, 4)

        with tracking() as touched:
            await later()
        return touched

    assert asyncio.run(request()) == {(T, 4)}


def test_a_single_node_answers_at_once() -> None:
    commits = Commits(None)
    assert asyncio.run(commits.settle({(T, 0)})) == E.NONE
    commits.check(T, 0)  # never refuses
    done: list[E] = []
    commits.after_commit(T, 0, 10, done.append)
    assert done == [E.NONE]


def test_settle_waits_for_the_log_end_at_the_time_of_asking() -> None:
    async def scenario() -> None:
        replication = HeldReplication()
        commits = Commits(replication)
        replication.ends[(T, 1)] = 7
        settled = asyncio.ensure_future(commits.settle({(T, 1)}))
        await asyncio.sleep(0)
        replication.ends[(T, 1)] = 9  # written after the answer was built: not waited for
        replication.commit(T, 1, 6)
        await asyncio.sleep(0)
        assert not settled.done()
        replication.commit(T, 1, 7)
        assert await asyncio.wait_for(settled, 5) == E.NONE
        assert replication.waits == [(T, 1, 7)]

    asyncio.run(scenario())


@pytest.mark.parametrize(("failure", "answered"), [
    (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
])
def test_a_failed_wait_is_answered_with_the_coordinators_error(failure: E, answered: E) -> None:
    async def scenario() -> E:
        replication = HeldReplication()
        replication.ends[(T, 0)] = 3
        settled = asyncio.ensure_future(Commits(replication).settle({(T, 0)}))
        await asyncio.sleep(0)
        replication.fail(failure)
        return await asyncio.wait_for(settled, 5)

    assert asyncio.run(scenario()) == answered


def test_a_partition_this_broker_no_longer_has_is_not_coordinated_here() -> None:
    assert asyncio.run(Commits(HeldReplication()).settle({(T, 0)})) == E.NOT_COORDINATOR


def test_an_append_below_min_isr_is_refused_before_writing() -> None:
    replication = HeldReplication()
    replication.below_min_isr.add((T, 2))
    commits = Commits(replication)
    commits.check(T, 1)
    with pytest.raises(Exception) as refused:
        commits.check(T, 2)
    assert getattr(refused.value, "code", None) == E.COORDINATOR_NOT_AVAILABLE


def test_after_commit_runs_only_once_committed() -> None:
    async def scenario() -> list[E]:
        replication = HeldReplication()
        done: list[E] = []
        Commits(replication).after_commit(T, 0, 5, done.append)
        await asyncio.sleep(0)
        replication.commit(T, 0, 4)
        await asyncio.sleep(0)
        assert done == []
        replication.commit(T, 0, 5)
        for _ in range(5):
            await asyncio.sleep(0)
        return done

    assert asyncio.run(scenario()) == [E.NONE]


def test_one_error_map_for_every_coordinator() -> None:
    assert coordinator_error(E.NOT_ENOUGH_REPLICAS) == E.COORDINATOR_NOT_AVAILABLE
    assert coordinator_error(E.KAFKA_STORAGE_ERROR) == E.NOT_COORDINATOR
    assert coordinator_error(E.RECORD_LIST_TOO_LARGE) == E.UNKNOWN_SERVER_ERROR
    assert coordinator_error(E.INVALID_PRODUCER_EPOCH) == E.INVALID_PRODUCER_EPOCH
    assert append_error(StorageError("disk gone", E.KAFKA_STORAGE_ERROR)).code == E.NOT_COORDINATOR
    assert append_error(StorageError("full", E.NOT_ENOUGH_REPLICAS)).code == \
        E.COORDINATOR_NOT_AVAILABLE
