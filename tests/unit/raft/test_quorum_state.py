"""The quorum-state file, in Kafka's exact JSON (the expected lines are what Kafka 4.4.0's
FileQuorumStateStore writes for the same elections), and its in-memory twin."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from strom.raft.quorum_state import (
    FILE_NAME,
    ElectionState,
    FileQuorumStateStore,
    MemoryQuorumStateStore,
    QuorumStateError,
    QuorumStateStore,
    decode_quorum_state,
    encode_quorum_state,
)

DIR = uuid.UUID(int=5)  # "AAAAAAAAAAAAAAAAAAAABQ"


@pytest.mark.parametrize(("state", "kraft_version", "line"), [
    (ElectionState(7, voted_id=3, voted_directory_id=DIR), 1,
     '{"leaderId":-1,"leaderEpoch":7,"votedId":3,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAABQ",'
     '"data_version":1}'),
    (ElectionState(4), 1,
     '{"leaderId":-1,"leaderEpoch":4,"votedId":-1,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA",'
     '"data_version":1}'),
    (ElectionState(0, voters=frozenset({1})), 0,
     '{"clusterId":"","leaderId":-1,"leaderEpoch":0,"votedId":-1,"appliedOffset":0,'
     '"currentVoters":[{"voterId":1}],"data_version":0}'),
    (ElectionState(5, leader_id=2, voted_id=2, voters=frozenset({3, 1, 2})), 0,
     '{"clusterId":"","leaderId":2,"leaderEpoch":5,"votedId":2,"appliedOffset":0,'
     '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}'),
])
def test_kafkas_json(state: ElectionState, kraft_version: int, line: str) -> None:
    assert encode_quorum_state(state, kraft_version) == line
    assert decode_quorum_state(line) == state


def test_reads_kafkas_voter_order_and_fields_of_the_other_version() -> None:
    v0 = ('{"clusterId":"","leaderId":2,"leaderEpoch":5,"votedId":2,"appliedOffset":0,'
          '"currentVoters":[{"voterId":3},{"voterId":2},{"voterId":1}],"data_version":0}')
    assert decode_quorum_state(v0).voters == {1, 2, 3}
    v0_null = v0.replace('[{"voterId":3},{"voterId":2},{"voterId":1}]', "null")
    assert decode_quorum_state(v0_null).voters == frozenset()
    # the directory id of v1 has no place in v0, the voters of v0 none in v1
    state = ElectionState(3, voted_id=1, voted_directory_id=DIR, voters=frozenset({1}))
    assert decode_quorum_state(encode_quorum_state(state, 0)).voted_directory_id is None
    assert decode_quorum_state(encode_quorum_state(state, 1)).voters == frozenset()


@pytest.mark.parametrize(("text", "why"), [
    ("", "empty"),
    ("garbage", "Expecting value"),
    ("[1]", "not a JSON object"),
    ('{"leaderId":1,"leaderEpoch":2,"votedId":-1}', '"data_version" is missing'),
    ('{"leaderId":1,"leaderEpoch":2,"votedId":-1,"data_version":2}', "data_version 2"),
    ('{"leaderId":1,"votedId":-1,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}',
     '"leaderEpoch" is missing'),
    ('{"leaderId":"1","leaderEpoch":2,"votedId":-1,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA",'
     '"data_version":1}', "'1', not a number"),
    ('{"leaderId":1,"leaderEpoch":2,"votedId":-1,"data_version":1}', '"votedDirectoryId"'),
    ('{"leaderId":1,"leaderEpoch":2,"votedId":3,"votedDirectoryId":"AAAA","data_version":1}',
     "invalid topic id"),
    ('{"leaderId":1,"leaderEpoch":-2,"votedId":-1,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA",'
     '"data_version":1}', "negative"),
    ('{"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,'
     '"currentVoters":[1],"data_version":0}', '"currentVoters"'),
])
def test_garbage_is_one_clear_error(text: str, why: str) -> None:
    with pytest.raises(QuorumStateError) as e:
        decode_quorum_state(text, "/x/quorum-state")
    assert str(e.value).startswith("/x/quorum-state is not a valid quorum-state file: ")
    assert why in str(e.value) and "\n" not in str(e.value)


def test_file_store(tmp_path: Path) -> None:
    path = tmp_path / "__cluster_metadata-0" / FILE_NAME
    store: QuorumStateStore = FileQuorumStateStore(path)
    assert store.read() is None
    state = ElectionState(9, leader_id=1, voted_id=1, voted_directory_id=DIR)
    store.write(state, 1)
    assert path.read_text() == encode_quorum_state(state, 1)  # one line, no newline
    assert not path.with_name(FILE_NAME + ".tmp").exists()
    assert store.read() == state
    store.write(ElectionState(10), 1)
    assert store.read() == ElectionState(10)
    path.write_text("{")
    with pytest.raises(QuorumStateError, match=str(path)):
        store.read()
    store.clear()
    assert store.read() is None and not path.exists()


def test_memory_store_behaves_like_the_file() -> None:
    store: QuorumStateStore = MemoryQuorumStateStore()
    assert store.read() is None
    store.write(ElectionState(1, voters=frozenset({1, 2, 3})), 0)
    store.write(ElectionState(2, voted_id=3), 0)
    assert store.read() == ElectionState(2, voted_id=3)
    assert isinstance(store, MemoryQuorumStateStore) and store.writes == 2
    store.clear()
    assert store.read() is None


def test_election_state() -> None:
    s = ElectionState(3, voted_id=2, voted_directory_id=DIR)
    assert s.has_voted and not s.has_leader and not s.is_leader(2)
    assert s.voted_for(2, DIR) and s.voted_for(2) and not s.voted_for(2, uuid.UUID(int=6))
    assert not s.voted_for(1, DIR)
    assert ElectionState(3, voted_id=2).voted_for(2, DIR)
    assert ElectionState(3, leader_id=4).is_leader(4)
    with pytest.raises(ValueError):
        ElectionState(-1)
    with pytest.raises(ValueError):
        ElectionState(1, voted_directory_id=DIR)
