"""One RaftClient driven by hand: put it in a state, feed it messages, read what it sends."""

from __future__ import annotations

import random
from typing import Any

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.raft import messages as m
from strom.raft.client import Outbound, Pending, RaftClient
from strom.raft.log import MemoryRaftLog
from strom.raft.quorum_state import ElectionState, MemoryQuorumStateStore, encode_quorum_state
from strom.raft.types import (
    DataRecord,
    OffsetAndEpoch,
    RaftBatch,
    RaftSettings,
    ReplicaKey,
    VoterSet,
    leader_change_record,
)

CLUSTER = "cluster-a"
VOTERS = VoterSet.static([1, 2, 3])


class Harness:
    def __init__(self, node_id: int = 1, *, voters: VoterSet = VOTERS,
                 stored: ElectionState | None = None, log: MemoryRaftLog | None = None,
                 settings: RaftSettings | None = None, now: int = 0) -> None:
        self.log = log if log is not None else MemoryRaftLog()
        self.store = MemoryQuorumStateStore()
        if stored is not None:  # as a previous run left it, without counting a write
            self.store.text = encode_quorum_state(stored, 0)
        self.voters = voters
        self.client = RaftClient(node_id=node_id, voters=voters, log=self.log, store=self.store,
                                 rng=random.Random(7), cluster_id=CLUSTER, settings=settings)
        self.now = now
        self.client.initialize(now)
        self.sent: list[Outbound] = []
        self.completed: list[Pending] = []

    @property
    def state(self) -> Any:
        return self.client.state

    def poll(self, now: int | None = None) -> list[Outbound]:
        if now is not None:
            self.now = now
        result = self.client.poll(self.now)
        self.sent.extend(result.outbound)
        self.completed.extend(result.completed)
        return result.outbound

    def request(self, api_key: ApiKey, message: dict[str, Any], source: int = 2) -> Any:
        return self.client.handle_request(self.now, source, api_key, message)

    def respond(self, ob: Outbound, response: dict[str, Any]) -> None:
        self.client.handle_response(self.now, ob.destination, ob.api_key, ob.correlation_id,
                                    response)

    def elect(self, epoch: int) -> None:
        """Become leader of `epoch` (stored as having voted for itself, then granted)."""
        assert self.client.state.name == "Candidate", self.client.state
        for ob in self.poll():
            if ob.api_key == ApiKey.VOTE:
                self.respond(ob, m.vote_response(error=ErrorCode.NONE, epoch=epoch,
                                                 leader_id=None, granted=True, nodes=[]))
        assert self.client.is_leader(), self.client.state


def leader(epoch: int = 3, node_id: int = 1, log: MemoryRaftLog | None = None,
           settings: RaftSettings | None = None) -> Harness:
    h = Harness(node_id, stored=ElectionState(epoch, voted_id=node_id), log=log,
                settings=settings)
    h.elect(epoch)
    return h


def log_with(*epochs_and_counts: tuple[int, int]) -> MemoryRaftLog:
    """A log holding, per (epoch, n): a LeaderChange then n-1 data records of that epoch."""
    log = MemoryRaftLog()
    for epoch, n in epochs_and_counts:
        records: list[Any] = [leader_change_record(1, [1, 2, 3], [1, 2])]
        log.append_as_follower((RaftBatch(log.end_offset(), epoch, tuple(records)),))
        if n > 1:
            data = tuple(DataRecord(f"e{epoch}-{i}".encode()) for i in range(n - 1))
            log.append_as_follower((RaftBatch(log.end_offset(), epoch, data),))
    log.flush()
    return log


def fetch(epoch: int, offset: int, last_epoch: int, *, replica: int = 2,
          max_wait: int = 500, hw: int | None = None, cluster: str | None = CLUSTER,
          ) -> dict[str, Any]:
    return m.fetch_request(cluster_id=cluster, replica=ReplicaKey(replica), epoch=epoch,
                           fetch_offset=offset, last_fetched_epoch=last_epoch, high_watermark=hw,
                           max_wait_ms=max_wait, max_bytes=1 << 20)


def vote(epoch: int, last: OffsetAndEpoch, *, candidate: int = 2, voter: int = 1,
         pre_vote: bool = False, cluster: str | None = CLUSTER) -> dict[str, Any]:
    return m.vote_request(cluster_id=cluster, voter=ReplicaKey(voter),
                          candidate=ReplicaKey(candidate), epoch=epoch, last=last,
                          pre_vote=pre_vote)


def partition(response: dict[str, Any]) -> dict[str, Any]:
    """The single partition of any Raft response."""
    topics = response.get("topics") or response.get("responses")
    assert topics and len(topics) == 1, response
    parts = topics[0]["partitions"]
    assert len(parts) == 1
    result: dict[str, Any] = parts[0]
    return result
