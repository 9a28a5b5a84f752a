"""What the clients of a run were told, as plain data: the checker's only input.

Every record value is unique in a run, so a value names its write. A :class:`Write` is one
transaction (several values) or one non-transactional record (one value), with the outcome the
client got: committed (acknowledged), aborted (abort_transaction succeeded, no commit was ever
tried) or unknown (anything else: a timeout, a fatal error, a commit that failed). A
:class:`Read` is one record a consumer saw; the reader named :data:`FINAL` read every partition
from the start to its end after the run, the others read while it ran.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

COMMITTED = "committed"
ABORTED = "aborted"
UNKNOWN = "unknown"
OUTCOMES = (COMMITTED, ABORTED, UNKNOWN)
FINAL = "final"
NO_OFFSET = -1  # a group with no committed offset for a partition

# A record on the output topic of consume-transform-produce says which input record it came
# from: ``ctp:<transaction>:<input partition>:<input offset>``.
CTP_PREFIX = "ctp"


def ctp_value(txn: str, partition: int, offset: int) -> str:
    return f"{CTP_PREFIX}:{txn}:{partition}:{offset}"


def parse_ctp(value: str) -> tuple[int, int] | None:
    """(input partition, input offset) of an output record; None for any other value."""
    parts = value.split(":")
    if len(parts) != 4 or parts[0] != CTP_PREFIX:
        return None
    try:
        return int(parts[2]), int(parts[3])
    except ValueError:
        return None


@dataclass(frozen=True)
class Write:
    id: str
    values: tuple[str, ...]
    outcome: str
    transactional: bool = True

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, not {self.outcome!r}")


@dataclass(frozen=True)
class Read:
    topic: str
    partition: int
    offset: int
    value: str
    reader: str


@dataclass(frozen=True)
class OffsetCommit:
    """An offset the group committed and was acknowledged for (its transaction committed)
    at monotonic time ``at``."""

    partition: int
    offset: int
    at: float


@dataclass(frozen=True)
class OffsetRead:
    """The group's committed offset as OffsetFetch answered it between ``start`` and ``end``."""

    partition: int
    offset: int
    start: float
    end: float


@dataclass
class History:
    writes: list[Write] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    # consume-transform-produce: the input topic, its group's committed offsets after the run
    input_topic: str = ""
    final_offsets: dict[int, int] = field(default_factory=dict)
    offset_commits: list[OffsetCommit] = field(default_factory=list)
    offset_reads: list[OffsetRead] = field(default_factory=list)
    # "<topic>-<partition>" -> replica name -> its data records (offset, key, value), in order
    replicas: dict[str, dict[str, list[tuple[int, bytes | None, bytes | None]]]] = field(
        default_factory=dict)
    # partitions whose read_committed end never reached the log end (an open transaction left)
    hanging: list[str] = field(default_factory=list)

    def dump(self, path: Path) -> None:
        """The history as JSON, to look at a failed run (replica contents left out: the log
        files are kept)."""
        data = dataclasses.asdict(self)
        data["replicas"] = {k: {r: len(v) for r, v in reps.items()}
                            for k, reps in self.replicas.items()}
        path.write_text(json.dumps(data, indent=0))
