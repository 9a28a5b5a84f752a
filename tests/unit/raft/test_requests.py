"""Bad and stale Raft requests get Kafka's error codes, in Kafka's validation order, and change
nothing they should not (design brief §1)."""

from __future__ import annotations

import uuid

import pytest
from tests.unit.raft.harness import (
    Harness,
    fetch,
    leader,
    log_with,
    partition,
    vote,
)

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode as E
from strom.raft import messages as m
from strom.raft.log import MemoryRaftLog, RawSnapshot
from strom.raft.quorum_state import ElectionState
from strom.raft.types import (
    METADATA_TOPIC_ID,
    FatalRaftError,
    NotLeaderError,
    OffsetAndEpoch,
    ReplicaKey,
)

# ----------------------------------------------------------------------------- Vote


def test_vote_with_another_cluster_id_is_refused_and_changes_nothing() -> None:
    h = Harness(stored=ElectionState(3))
    before = h.store.writes
    resp = h.request(ApiKey.VOTE, vote(9, OffsetAndEpoch(0, 0), cluster="other"))
    assert resp == {"error_code": E.INCONSISTENT_CLUSTER_ID}
    assert h.client.epoch == 3 and h.store.writes == before
    # No cluster id means "do not check".
    resp = h.request(ApiKey.VOTE, vote(4, OffsetAndEpoch(0, 0), cluster=None))
    assert partition(resp)["error_code"] == E.NONE


def test_vote_for_another_topic_partition_is_a_top_level_invalid_request() -> None:
    h = Harness(stored=ElectionState(3))
    req = vote(4, OffsetAndEpoch(0, 0))
    req["topics"][0]["partitions"][0]["partition_index"] = 1
    assert h.request(ApiKey.VOTE, req) == {"error_code": E.INVALID_REQUEST}
    req = vote(4, OffsetAndEpoch(0, 0))
    req["topics"].append(req["topics"][0])
    assert h.request(ApiKey.VOTE, req) == {"error_code": E.INVALID_REQUEST}


@pytest.mark.parametrize(("epoch", "last", "pre_vote", "legal"), [
    (4, OffsetAndEpoch(-1, 0), False, False),   # negative offset
    (4, OffsetAndEpoch(0, -1), False, False),   # negative epoch
    (4, OffsetAndEpoch(5, 4), False, False),    # a candidate's log cannot hold its new epoch
    (4, OffsetAndEpoch(5, 3), False, True),
    (4, OffsetAndEpoch(5, 4), True, True),      # a pre-vote carries the current epoch
    (4, OffsetAndEpoch(5, 5), True, False),
])
def test_vote_offsets_and_epochs_are_validated_first(epoch: int, last: OffsetAndEpoch,
                                                     pre_vote: bool, legal: bool) -> None:
    h = Harness(stored=ElectionState(4))
    resp = h.request(ApiKey.VOTE, vote(epoch, last, pre_vote=pre_vote))
    p = partition(resp)
    assert resp["error_code"] == 0
    assert p["error_code"] == (E.NONE if legal else E.INVALID_REQUEST)
    assert (p["leader_epoch"], p["leader_id"]) == (4, -1)


def test_a_stale_vote_is_fenced_and_a_negative_candidate_is_invalid() -> None:
    h = Harness(stored=ElectionState(5))
    p = partition(h.request(ApiKey.VOTE, vote(4, OffsetAndEpoch(0, 0))))
    assert (p["error_code"], p["leader_epoch"], p["vote_granted"]) == \
        (E.FENCED_LEADER_EPOCH, 5, False)
    p = partition(h.request(ApiKey.VOTE, vote(6, OffsetAndEpoch(0, 0), candidate=-1)))
    assert p["error_code"] == E.INVALID_REQUEST
    assert h.client.epoch == 5


def test_a_vote_in_a_new_epoch_moves_to_it_even_when_the_voter_key_is_wrong() -> None:
    h = Harness(stored=ElectionState(5))
    p = partition(h.request(ApiKey.VOTE, vote(7, OffsetAndEpoch(0, 0), voter=3)))
    assert (p["error_code"], p["vote_granted"], p["leader_epoch"]) == (E.INVALID_VOTER_KEY, False, 7)
    assert h.client.epoch == 7 and h.state.voted_key is None
    assert h.store.read() == ElectionState(7, None, None, voters=frozenset({1, 2, 3}))


def test_a_voter_key_with_another_directory_is_not_this_replica() -> None:
    mine = uuid.uuid4()
    h = Harness(stored=ElectionState(5))
    h.client.local = ReplicaKey(1, mine)
    req = vote(6, OffsetAndEpoch(0, 0))
    req["topics"][0]["partitions"][0]["voter_directory_id"] = uuid.uuid4()
    assert partition(h.request(ApiKey.VOTE, req))["error_code"] == E.INVALID_VOTER_KEY
    req["topics"][0]["partitions"][0]["voter_directory_id"] = mine
    assert partition(h.request(ApiKey.VOTE, req))["vote_granted"] is True


def test_a_granted_vote_is_stored_before_the_answer_and_a_pre_vote_never() -> None:
    h = Harness(stored=ElectionState(5), log=log_with((5, 3)))
    writes = h.store.writes
    p = partition(h.request(ApiKey.VOTE, vote(5, OffsetAndEpoch(3, 5), pre_vote=True)))
    assert p["vote_granted"] is True and h.store.writes == writes
    p = partition(h.request(ApiKey.VOTE, vote(6, OffsetAndEpoch(2, 5))))  # behind: no
    assert p["vote_granted"] is False and h.state.voted_key is None
    p = partition(h.request(ApiKey.VOTE, vote(6, OffsetAndEpoch(3, 5))))
    assert p["vote_granted"] is True
    assert h.store.read() == ElectionState(6, None, 2, voters=frozenset({1, 2, 3}))
    p = partition(h.request(ApiKey.VOTE, vote(6, OffsetAndEpoch(9, 5), candidate=3)))
    assert p["vote_granted"] is False  # one vote per epoch


# ----------------------------------------------------------------------------- BeginQuorumEpoch


def _begin(epoch: int, leader_id: int = 2, voter: int = 1, cluster: str | None = "cluster-a"
           ) -> dict[str, object]:
    return m.begin_quorum_epoch_request(cluster_id=cluster, voter=ReplicaKey(voter),
                                        leader_id=leader_id, epoch=epoch, leader_endpoints=())


def test_begin_quorum_epoch_errors_in_order() -> None:
    h = Harness(stored=ElectionState(5))
    assert h.request(ApiKey.BEGIN_QUORUM_EPOCH, _begin(6, cluster="x")) == \
        {"error_code": E.INCONSISTENT_CLUSTER_ID}
    bad = _begin(6)
    bad["topics"] = []  # type: ignore[index]
    assert h.request(ApiKey.BEGIN_QUORUM_EPOCH, bad) == {"error_code": E.INVALID_REQUEST}
    assert partition(h.request(ApiKey.BEGIN_QUORUM_EPOCH, _begin(4)))["error_code"] == \
        E.FENCED_LEADER_EPOCH
    assert partition(h.request(ApiKey.BEGIN_QUORUM_EPOCH, _begin(6, leader_id=-1)))[
        "error_code"] == E.INVALID_REQUEST
    assert h.client.epoch == 5
    # The transition happens first; the voter key is checked after it.
    p = partition(h.request(ApiKey.BEGIN_QUORUM_EPOCH, _begin(6, voter=3)))
    assert (p["error_code"], p["leader_id"], p["leader_epoch"]) == (E.INVALID_VOTER_KEY, 2, 6)
    assert h.state.name == "Follower" and h.state.leader == 2


def test_a_second_leader_in_one_epoch_is_fatal() -> None:
    h = Harness(stored=ElectionState(5, leader_id=2))
    with pytest.raises(FatalRaftError):
        h.request(ApiKey.BEGIN_QUORUM_EPOCH, _begin(5, leader_id=3))


# ----------------------------------------------------------------------------- EndQuorumEpoch


def _end(epoch: int, preferred: list[int], leader_id: int = 2) -> dict[str, object]:
    return m.end_quorum_epoch_request(cluster_id=None, leader_id=leader_id, epoch=epoch,
                                      preferred=[ReplicaKey(i) for i in preferred],
                                      leader_endpoints=())


@pytest.mark.parametrize(("preferred", "backoff"), [
    ([1, 3], 0), ([3, 1], 500), ([3, 4, 1], 500), ([3, 4, 5, 1], 500), ([3], 1000),
])
def test_end_quorum_epoch_sets_the_successor_backoff(preferred: list[int], backoff: int) -> None:
    h = Harness(stored=ElectionState(5, leader_id=2), now=100)
    assert h.state.name == "Follower"
    p = partition(h.request(ApiKey.END_QUORUM_EPOCH, _end(5, preferred)))
    assert p["error_code"] == E.NONE
    assert h.state.fetch_deadline == 100 + backoff
    h.poll(100 + backoff)
    assert h.state.name == "Prospective"


def test_end_quorum_epoch_validation() -> None:
    h = Harness(stored=ElectionState(5, leader_id=2))
    assert partition(h.request(ApiKey.END_QUORUM_EPOCH, _end(4, [1])))["error_code"] == \
        E.FENCED_LEADER_EPOCH
    assert partition(h.request(ApiKey.END_QUORUM_EPOCH, _end(5, [1], leader_id=-1)))[
        "error_code"] == E.INVALID_REQUEST
    bad = _end(5, [1])
    bad["cluster_id"] = "x"
    assert h.request(ApiKey.END_QUORUM_EPOCH, bad) == {"error_code": E.INCONSISTENT_CLUSTER_ID}


# ----------------------------------------------------------------------------- Fetch


def test_fetch_errors_before_the_leader_checks() -> None:
    h = leader(epoch=3)
    assert h.request(ApiKey.FETCH, fetch(3, 0, 0, cluster="x")) == \
        {"error_code": E.INCONSISTENT_CLUSTER_ID}
    other = fetch(3, 0, 0)
    other["topics"][0]["topic_id"] = uuid.uuid4()
    assert h.request(ApiKey.FETCH, other) == {"error_code": E.INVALID_REQUEST}
    for bad in (fetch(3, 0, 0, max_wait=-1), fetch(3, -1, 0), fetch(3, 0, -1), fetch(3, 0, 4)):
        p = partition(h.request(ApiKey.FETCH, bad))
        assert p["error_code"] == E.INVALID_REQUEST
        assert p["current_leader"] == {"leader_id": 1, "leader_epoch": 3}


def test_fetch_leader_only_errors_name_the_leader() -> None:
    h = leader(epoch=3)
    assert partition(h.request(ApiKey.FETCH, fetch(2, 0, 0)))["error_code"] == \
        E.FENCED_LEADER_EPOCH
    assert partition(h.request(ApiKey.FETCH, fetch(4, 0, 0)))["error_code"] == \
        E.UNKNOWN_LEADER_EPOCH
    follower = Harness(2, stored=ElectionState(3, leader_id=1))
    resp = follower.request(ApiKey.FETCH, fetch(3, 0, 0, replica=7))
    p = partition(resp)
    assert p["error_code"] == E.NOT_LEADER_OR_FOLLOWER
    assert p["current_leader"] == {"leader_id": 1, "leader_epoch": 3}
    assert resp["node_endpoints"] == [{"node_id": 1, "host": "node-1", "port": 9093,
                                       "rack": None}]
    h.client.shutdown(h.now, 5000)
    assert partition(h.request(ApiKey.FETCH, fetch(3, 0, 0)))["error_code"] == \
        E.BROKER_NOT_AVAILABLE


def test_fetch_answers_divergence_and_the_follower_truncates() -> None:
    # Leader: epochs 1 (offsets 0-2) and 3 (3-5). Follower: epochs 1 (0-2) and 2 (3-6).
    h = leader(epoch=4, log=log_with((1, 3), (3, 3)))
    resp = h.request(ApiKey.FETCH, fetch(4, 7, 2))
    p = partition(resp)
    assert p["diverging_epoch"] == {"epoch": 1, "end_offset": 3}
    assert p["records"] is None and p["error_code"] == E.NONE

    f = Harness(2, stored=ElectionState(4, leader_id=1), log=log_with((1, 3), (2, 4)))
    [ob] = [o for o in f.poll() if o.api_key == ApiKey.FETCH]
    assert partition(ob.request)["fetch_offset"] == 7
    f.respond(ob, resp)
    assert f.log.end_offset() == 3 and f.log.last_fetched_epoch() == 1


def test_truncation_below_the_high_watermark_is_fatal() -> None:
    f = Harness(2, stored=ElectionState(4, leader_id=1), log=log_with((1, 3), (2, 4)))
    f.state.high_watermark = 5
    [ob] = [o for o in f.poll() if o.api_key == ApiKey.FETCH]
    resp = m.fetch_response(error=E.NONE, leader_id=1, epoch=4, high_watermark=5,
                            log_start_offset=0, records=None,
                            diverging=OffsetAndEpoch(3, 1), nodes=[])
    with pytest.raises(FatalRaftError):
        f.respond(ob, resp)
    assert f.log.end_offset() == 7


def test_a_parked_fetch_completes_on_new_data_or_at_max_wait() -> None:
    h = leader(epoch=3)
    end = h.log.end_offset()
    h.poll()
    parked = h.request(ApiKey.FETCH, fetch(3, end, 3, max_wait=500))
    assert parked.__class__.__name__ == "Pending"
    h.poll(h.now + 100)
    assert h.completed == []
    h.client.append([b"x"], now_ms=h.now)
    h.poll(h.now + 25)  # linger over: appended, the parked fetch wakes with it
    [done] = h.completed
    p = partition(done.response)
    assert p["records"] is not None and p["records"][0].records[0].value == b"x"

    h.completed.clear()
    parked = h.request(ApiKey.FETCH, fetch(3, h.log.end_offset(), 3, max_wait=500))
    h.poll(h.now + 499)
    assert h.completed == []
    h.poll(h.now + 1)
    [done] = h.completed
    assert partition(done.response)["records"] is None


def test_a_fetch_with_max_wait_zero_or_a_lagging_hw_answers_at_once() -> None:
    h = leader(epoch=3)
    end = h.log.end_offset()
    assert isinstance(h.request(ApiKey.FETCH, fetch(3, end, 3, max_wait=0)), dict)
    # Follower 2 catches up: the leader's HW is now known, ahead of what 3 reports.
    h.request(ApiKey.FETCH, fetch(3, end, 3, max_wait=0, replica=2))
    assert h.client.high_watermark == end
    assert isinstance(h.request(ApiKey.FETCH, fetch(3, end, 3, replica=3, hw=0)), dict)
    assert not isinstance(h.request(ApiKey.FETCH, fetch(3, end, 3, replica=3, hw=end)), dict)


def test_parked_fetches_answer_not_leader_when_leadership_ends() -> None:
    h = leader(epoch=3)
    h.request(ApiKey.FETCH, fetch(3, h.log.end_offset(), 3))
    h.client.resign(3)
    h.poll()
    [done] = h.completed
    p = partition(done.response)
    assert p["error_code"] == E.NOT_LEADER_OR_FOLLOWER
    assert p["current_leader"] == {"leader_id": 1, "leader_epoch": 3}


def test_append_only_on_the_leader() -> None:
    h = Harness(stored=ElectionState(3, leader_id=2))
    with pytest.raises(NotLeaderError):
        h.client.append([b"x"])
    lead = leader(epoch=3)
    with pytest.raises(NotLeaderError):
        lead.client.append([b"x"], epoch=2)
    assert lead.client.append([b"x", b"y"]) == lead.log.end_offset() + 1


# ----------------------------------------------------------------------------- DescribeQuorum


def test_describe_quorum() -> None:
    h = leader(epoch=3)
    req = m.describe_quorum_request()
    req["topics"][0]["topic_name"] = "nope"
    p = partition(h.request(ApiKey.DESCRIBE_QUORUM, req))
    assert (p["error_code"], p["partition_index"]) == (E.UNKNOWN_TOPIC_OR_PARTITION, 0)
    assert h.request(ApiKey.DESCRIBE_QUORUM, req)["topics"][0]["topic_name"] == "nope"
    f = Harness(2, stored=ElectionState(3, leader_id=1))
    assert partition(f.request(ApiKey.DESCRIBE_QUORUM, m.describe_quorum_request()))[
        "error_code"] == E.NOT_LEADER_OR_FOLLOWER

    h.now = 50
    h.request(ApiKey.FETCH, fetch(3, 1, 3, replica=2, max_wait=0))
    h.request(ApiKey.FETCH, fetch(3, 0, 0, replica=9, max_wait=0))  # an observer
    resp = h.request(ApiKey.DESCRIBE_QUORUM, m.describe_quorum_request())
    p = partition(resp)
    assert (p["leader_id"], p["leader_epoch"], p["high_watermark"]) == (1, 3, 1)
    voters = {v["replica_id"]: v for v in p["current_voters"]}
    assert voters[1]["log_end_offset"] == 1 and voters[1]["last_caught_up_timestamp"] == 50
    assert voters[2]["log_end_offset"] == 1 and voters[2]["last_fetch_timestamp"] == 50
    assert voters[3]["log_end_offset"] == -1
    assert [o["replica_id"] for o in p["observers"]] == [9]
    assert {n["node_id"] for n in resp["nodes"]} == {1, 2, 3}


# ----------------------------------------------------------------------------- FetchSnapshot


class _Snapshot:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def size(self) -> int:
        return len(self.data)

    def read(self, position: int, max_bytes: int) -> bytes:
        return self.data[position:position + max_bytes]


class _SnapshotLog(MemoryRaftLog):
    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshot | None:
        return {OffsetAndEpoch(0, 0): _Snapshot(b"boot"),
                OffsetAndEpoch(1, 1): _Snapshot(b"0123456789")}.get(snapshot_id)


def _snap(epoch: int, sid: OffsetAndEpoch, position: int, *, topic: str = "__cluster_metadata",
          partitions: int = 1, cluster: str | None = None) -> dict[str, object]:
    return {"cluster_id": cluster, "replica_id": 2, "max_bytes": 4, "topics": [{
        "name": topic, "partitions": [{
            "partition": 0, "current_leader_epoch": epoch, "position": position,
            "snapshot_id": {"end_offset": sid.offset, "epoch": sid.epoch}}] * partitions}]}


def test_fetch_snapshot_errors() -> None:
    h = leader(epoch=3, log=_SnapshotLog())
    ok = OffsetAndEpoch(1, 1)
    assert h.request(ApiKey.FETCH_SNAPSHOT, _snap(3, ok, 0, cluster="x")) == \
        {"error_code": E.INCONSISTENT_CLUSTER_ID}
    assert h.request(ApiKey.FETCH_SNAPSHOT, _snap(3, ok, 0, partitions=2)) == \
        {"error_code": E.INVALID_REQUEST}
    resp = h.request(ApiKey.FETCH_SNAPSHOT, _snap(3, ok, 0, topic="t"))
    assert resp["topics"][0]["name"] == "t"
    assert partition(resp)["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
    assert partition(h.request(ApiKey.FETCH_SNAPSHOT, _snap(2, ok, 0)))["error_code"] == \
        E.FENCED_LEADER_EPOCH
    assert partition(h.request(ApiKey.FETCH_SNAPSHOT, _snap(3, OffsetAndEpoch(5, 1), 0)))[
        "error_code"] == E.SNAPSHOT_NOT_FOUND
    assert partition(h.request(ApiKey.FETCH_SNAPSHOT, _snap(3, OffsetAndEpoch(0, 0), 0)))[
        "error_code"] == E.SNAPSHOT_NOT_FOUND  # the bootstrap snapshot is never served
    for position in (-1, 10):
        assert partition(h.request(ApiKey.FETCH_SNAPSHOT, _snap(3, ok, position)))[
            "error_code"] == E.POSITION_OUT_OF_RANGE
    p = partition(h.request(ApiKey.FETCH_SNAPSHOT, _snap(3, ok, 8)))
    assert (p["error_code"], p["size"], p["position"], p["unaligned_records"]) == \
        (E.NONE, 10, 8, b"89")
    assert p["snapshot_id"] == {"end_offset": 1, "epoch": 1}


def test_a_fetch_from_an_empty_replica_gets_the_latest_snapshot_id() -> None:
    class Snapshotted(MemoryRaftLog):
        def latest_snapshot_id(self) -> OffsetAndEpoch | None:
            return OffsetAndEpoch(1, 1)

    h = leader(epoch=3, log=Snapshotted())
    p = partition(h.request(ApiKey.FETCH, fetch(3, 0, 0)))
    assert p["snapshot_id"] == {"end_offset": 1, "epoch": 1} and p["records"] is None


def test_observers_find_the_leader_through_not_leader_answers() -> None:
    obs = Harness(9, stored=None)
    assert obs.state.name == "Unattached"
    [ob] = obs.poll()
    assert ob.api_key == ApiKey.FETCH and ob.destination in (1, 2, 3)
    assert m.fetch_partition(ob.request) is not None
    assert ob.request["topics"][0]["topic_id"] == METADATA_TOPIC_ID
    resp = m.fetch_response(error=E.NOT_LEADER_OR_FOLLOWER, leader_id=2, epoch=4,
                            high_watermark=None, log_start_offset=0, records=None,
                            nodes=[{"node_id": 2, "host": "h2", "port": 1, "rack": None}])
    obs.respond(ob, resp)
    assert obs.state.name == "Follower" and obs.state.leader == 2 and obs.client.epoch == 4
    assert obs.state.endpoints[0].host == "h2"
    [ob] = obs.poll()
    assert ob.destination == 2
