"""The persisted election state: Kafka's ``quorum-state`` file, and an in-memory twin.

A replica must remember its epoch and its vote across restarts, or it could vote twice in one
epoch and let two leaders be elected. Kafka keeps them in
``<metadata.log.dir>/__cluster_metadata-0/quorum-state``, one JSON line written to
``quorum-state.tmp``, fsynced and renamed into place. Strom writes the same file, so a data
directory moves between Strom and Kafka:

- v0 (kraft.version 0): ``{"clusterId":"","leaderId":L,"leaderEpoch":E,"votedId":V,
  "appliedOffset":0,"currentVoters":[{"voterId":1},...],"data_version":0}``;
- v1 (kraft.version 1): ``{"leaderId":L,"leaderEpoch":E,"votedId":V,
  "votedDirectoryId":"<base64url uuid>","data_version":1}``.

-1 stands for "no leader" and "no vote" on disk, None in `ElectionState`; the zero UUID is
"no directory id". `MemoryQuorumStateStore` has the same interface for simulation tests.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from strom.storage.checkpoints import topic_id_from_str, topic_id_to_str, write_atomic

__all__ = [
    "FILE_NAME",
    "ElectionState",
    "FileQuorumStateStore",
    "MemoryQuorumStateStore",
    "QuorumStateError",
    "QuorumStateStore",
    "decode_quorum_state",
    "encode_quorum_state",
]

FILE_NAME = "quorum-state"
ZERO_UUID = uuid.UUID(int=0)
_NONE = -1


class QuorumStateError(ValueError):
    """An unreadable quorum-state file; the message names it and says what is wrong."""


@dataclass(frozen=True, slots=True)
class ElectionState:
    """What a replica knows of the election of one epoch.

    `voted_directory_id` is only kept under kraft.version 1, `voters` (node ids) only under 0.
    """

    epoch: int
    leader_id: int | None = None
    voted_id: int | None = None
    voted_directory_id: uuid.UUID | None = None
    voters: frozenset[int] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if self.epoch < 0:
            raise ValueError(f"epoch {self.epoch} is negative")
        if self.voted_id is None and self.voted_directory_id is not None:
            raise ValueError("a voted directory id without a voted id")

    @property
    def has_leader(self) -> bool:
        return self.leader_id is not None

    @property
    def has_voted(self) -> bool:
        return self.voted_id is not None

    def is_leader(self, node_id: int) -> bool:
        return self.leader_id == node_id

    def voted_for(self, node_id: int, directory_id: uuid.UUID | None = None) -> bool:
        """Whether this replica voted for (node_id, directory_id); an unset directory on
        either side matches any, as in Kafka's ReplicaKey comparison for votes."""
        if self.voted_id != node_id:
            return False
        mine = self.voted_directory_id
        return mine is None or directory_id is None or mine == directory_id


def _or_none(value: int) -> int | None:
    return None if value == _NONE else value


def encode_quorum_state(state: ElectionState, kraft_version: int) -> str:
    """The file's JSON line (no newline, as Kafka writes it): v0 under kraft.version 0, v1
    above, with Kafka's key order."""
    leader = _NONE if state.leader_id is None else state.leader_id
    voted = _NONE if state.voted_id is None else state.voted_id
    doc: dict[str, Any]
    if kraft_version == 0:
        doc = {"clusterId": "", "leaderId": leader, "leaderEpoch": state.epoch,
               "votedId": voted, "appliedOffset": 0,
               "currentVoters": [{"voterId": v} for v in sorted(state.voters)],
               "data_version": 0}
    else:
        directory = state.voted_directory_id or ZERO_UUID
        doc = {"leaderId": leader, "leaderEpoch": state.epoch, "votedId": voted,
               "votedDirectoryId": topic_id_to_str(directory), "data_version": 1}
    return json.dumps(doc, separators=(",", ":"))


def _int(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    if type(value) is not int:
        raise ValueError(f'"{key}" is {"missing" if value is None else repr(value)}, '
                         "not a number")
    return value


def _decode(text: str) -> ElectionState:
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise ValueError("the file is empty")
    doc = json.loads(lines[0])
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    version = _int(doc, "data_version")
    if version not in (0, 1):
        raise ValueError(f"data_version {version} is not within the supported 0..1")
    epoch, leader, voted = (_int(doc, k) for k in ("leaderEpoch", "leaderId", "votedId"))
    if version == 1:
        raw = doc.get("votedDirectoryId")
        if not isinstance(raw, str):
            raise ValueError('"votedDirectoryId" is missing or not a string')
        directory: uuid.UUID | None = topic_id_from_str(raw)
        if directory == ZERO_UUID or voted == _NONE:
            directory = None
        return ElectionState(epoch, _or_none(leader), _or_none(voted), directory)
    entries = doc.get("currentVoters") or []
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError('"currentVoters" is not a list of objects')
    voters = frozenset(_int(e, "voterId") for e in entries)
    return ElectionState(epoch, _or_none(leader), _or_none(voted), None, voters)


def decode_quorum_state(text: str, source: str = FILE_NAME) -> ElectionState:
    """Parse the file's content; anything else raises one `QuorumStateError` line."""
    try:
        return _decode(text)
    except (ValueError, TypeError) as e:  # json.JSONDecodeError and bad base64 included
        raise QuorumStateError(f"{source} is not a valid quorum-state file: {e}") from None


class QuorumStateStore(Protocol):
    """Where a replica keeps its `ElectionState`."""

    def read(self) -> ElectionState | None:
        """The stored state, or None when there is none yet."""
        ...

    def write(self, state: ElectionState, kraft_version: int) -> None:
        """Store durably before returning (the caller may then act on it, e.g. vote)."""
        ...

    def clear(self) -> None: ...


class FileQuorumStateStore:
    """The ``quorum-state`` file (`path` is the file itself)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> ElectionState | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as e:
            raise QuorumStateError(f"cannot read {self.path}: {e}") from None
        return decode_quorum_state(text, str(self.path))

    def write(self, state: ElectionState, kraft_version: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, encode_quorum_state(state, kraft_version), fsync=True,
                     fsync_dir=True)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)
        self.path.with_name(self.path.name + ".tmp").unlink(missing_ok=True)


class MemoryQuorumStateStore:
    """The same store in memory, for simulations: `writes` counts durable transitions, and
    the text form goes through the same encoder so the file format is exercised too."""

    def __init__(self) -> None:
        self.text: str | None = None
        self.writes = 0

    def read(self) -> ElectionState | None:
        return None if self.text is None else decode_quorum_state(self.text, "memory")

    def write(self, state: ElectionState, kraft_version: int) -> None:
        self.text = encode_quorum_state(state, kraft_version)
        self.writes += 1

    def clear(self) -> None:
        self.text = None
