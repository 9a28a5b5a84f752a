"""The voter set and kraft.version in force at each offset of the metadata log (KIP-853).

Under kraft.version 0 the voters are ``controller.quorum.voters`` and never change. Under 1 the
latest VotersRecord in the snapshot and the log is in force as soon as it is *appended*, before
it commits (Raft's single-server membership change): a leader counts the new majority at once,
and a truncation that drops the record brings the previous set back. So the history is kept by
offset, fed with every control record appended to the log (committed or not), cut back on
truncation and reset by a snapshot.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from strom.storage.checkpoints import topic_id_to_str

from .control import ControlType, Voter, VotersRecord
from .control import Endpoint as RecordEndpoint
from .types import ZERO_UUID, ControlEntry, Endpoint, KRaftVersion, ReplicaKey, VoterNode, VoterSet

__all__ = ["VoterHistory", "describe_voters", "kraft_version_entry", "voter_set_of_record",
           "voters_entry", "voters_record_of"]

#: the kraft.version range this implementation supports (sent in UpdateRaftVoter, written for
#: each voter it adds)
SUPPORTED_KRAFT_VERSIONS = (0, 1)


def describe_voters(voters: VoterSet) -> str:
    """``1@host:port (dir …)`` for each voter, for the log."""
    if not len(voters):
        return "none"
    return ", ".join(
        f"{n.key.id}" + "".join(f"@{e.host}:{e.port}" for e in n.endpoints[:1])
        + (f" (directory {topic_id_to_str(n.key.directory_id)})"
           if n.key.directory_id is not None else "")
        for n in voters)


def voter_set_of_record(record: VotersRecord) -> VoterSet:
    return VoterSet.of(VoterNode(ReplicaKey.of(v.voter_id, v.directory_id),
                                 tuple(Endpoint(e.name, e.host, e.port) for e in v.endpoints))
                       for v in record.voters)


def voters_record_of(voters: VoterSet) -> VotersRecord:
    lo, hi = SUPPORTED_KRAFT_VERSIONS
    return VotersRecord(tuple(
        Voter(n.key.id, n.key.wire_directory_id(),
              tuple(RecordEndpoint(e.name, e.host, e.port) for e in n.endpoints), lo, hi)
        for n in voters))


def voters_entry(voters: VoterSet) -> ControlEntry:
    """A VotersRecord as a log entry (kio's field names)."""
    lo, hi = SUPPORTED_KRAFT_VERSIONS
    return ControlEntry(ControlType.KRAFT_VOTERS, {"voters": [
        {"voter_id": n.key.id, "voter_directory_id": n.key.wire_directory_id(),
         "endpoints": [{"name": e.name, "host": e.host, "port": e.port} for e in n.endpoints],
         "k_raft_version_feature": {"min_supported_version": lo, "max_supported_version": hi}}
        for n in voters]})


def kraft_version_entry(level: int) -> ControlEntry:
    return ControlEntry(ControlType.KRAFT_VERSION, {"k_raft_version": int(level)})


def _voter_set_of_body(body: Mapping[str, object]) -> VoterSet:
    voters = body.get("voters")
    nodes = []
    for v in voters if isinstance(voters, list) else []:
        directory = v.get("voter_directory_id")
        endpoints = tuple(Endpoint(str(e["name"]), str(e["host"]), int(e["port"]))
                          for e in v.get("endpoints") or [])
        nodes.append(VoterNode(ReplicaKey.of(int(v["voter_id"]), directory
                                             if isinstance(directory, uuid.UUID) else ZERO_UUID),
                               endpoints))
    return VoterSet.of(nodes) if nodes else VoterSet.none()


@dataclass(frozen=True, slots=True)
class _At:
    offset: int
    voters: VoterSet


class VoterHistory:
    """Voter sets and kraft.version levels by the offset that set them.

    `static` is the configured set (kraft.version 0); a dynamic quorum starts from its
    bootstrap snapshot's VotersRecord (given to `reset`), or from none at all (a controller
    formatted with --no-initial-controllers knows no voters until it has fetched them)."""

    def __init__(self, static: VoterSet | None, kraft_version: KRaftVersion) -> None:
        self._base = static if static is not None else VoterSet.none()
        self._base_kraft = kraft_version
        self._sets: list[_At] = []
        self._krafts: list[tuple[int, KRaftVersion]] = []
        self._base_offset = -1  # the end offset of the snapshot the base came from
        self.next_offset = 0  # the first log offset not yet seen

    # -- queries
    def latest(self) -> VoterSet:
        return self._sets[-1].voters if self._sets else self._base

    def kraft_version(self) -> KRaftVersion:
        return self._krafts[-1][1] if self._krafts else self._base_kraft

    def needs_logging(self) -> bool:
        """A dynamic quorum whose voters come from the bootstrap snapshot (or the start-up
        arguments) only: no replica can fetch them from the log yet."""
        return (self.kraft_version() == KRaftVersion.DYNAMIC and not self._sets
                and self._base_offset <= 0 and len(self._base) > 0)

    def committed(self, high_watermark: int | None) -> VoterSet:
        """The set the committed log (below `high_watermark`) leaves in force."""
        hw = -1 if high_watermark is None else high_watermark
        for at in reversed(self._sets):
            if at.offset < hw:
                return at.voters
        return self._base

    def uncommitted_change(self, high_watermark: int | None) -> int | None:
        """The offset of a voter change at or above the HW (at most one may be pending)."""
        hw = -1 if high_watermark is None else high_watermark
        last = self._sets[-1] if self._sets else None
        return last.offset if last is not None and last.offset >= hw else None

    # -- feeding
    def reset(self, offset: int, kraft_version: KRaftVersion, voters: VoterSet | None) -> None:
        """A snapshot ending at `offset` holds these (a kraft.version 0 snapshot holds no
        voters: the configured ones stay in force)."""
        self._sets.clear()
        self._krafts.clear()
        self._base_kraft = kraft_version
        self._base_offset = offset
        if voters is not None:
            self._base = voters
        self.next_offset = offset

    def add(self, entries: Iterable[tuple[int, ControlEntry]], end_offset: int) -> bool:
        """Control records appended at their offsets, up to the log's `end_offset`; True if the
        latest voter set or kraft.version changed."""
        before = self.latest(), self.kraft_version()
        for offset, entry in entries:
            if offset < self.next_offset:
                continue
            if entry.type == ControlType.KRAFT_VOTERS:
                self._sets.append(_At(offset, _voter_set_of_body(entry.body)))
            elif entry.type == ControlType.KRAFT_VERSION:
                level = entry.body.get("k_raft_version", 0)
                self._krafts.append((offset, KRaftVersion(level if isinstance(level, int)
                                                          else 0)))
        self.next_offset = max(self.next_offset, end_offset)
        return (self.latest(), self.kraft_version()) != before

    def truncate_to(self, offset: int) -> bool:
        """The log was cut back to `offset`: what was appended there is gone. True if the
        latest voter set or kraft.version changed."""
        before = self.latest(), self.kraft_version()
        self._sets = [at for at in self._sets if at.offset < offset]
        self._krafts = [k for k in self._krafts if k[0] < offset]
        self.next_offset = min(self.next_offset, offset)
        return (self.latest(), self.kraft_version()) != before
