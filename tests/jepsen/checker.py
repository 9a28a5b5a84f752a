"""The checker: pure functions from a :class:`History` to the anomalies in it.

What must hold (issue 28):

- every acknowledged record and every committed transaction is read back, exactly once
  (``lost``, ``duplicate``);
- nothing is read that nobody wrote (``phantom``), no record of an aborted transaction is ever
  visible to read_committed (``aborted-read``), no transaction is torn: all or none of its
  records are visible (``torn``);
- what a reader saw stays: one offset never shows two values (``divergent-read``) and a record
  seen while the run went on is still there at the end (``vanished``);
- consume-transform-produce is exactly-once: each input record below the group's committed
  offset is processed once (``unprocessed``, ``processed-twice``), none above it
  (``processed-uncommitted``);
- the group's committed offsets never go back (``offset-regressed``);
- the replicas of each partition end equal (``replica-divergence``), and no transaction is left
  hanging (``hanging-transaction``).

Writes whose outcome is unknown may be visible or not, but only whole and only once.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from .history import (
    ABORTED,
    COMMITTED,
    FINAL,
    NO_OFFSET,
    UNKNOWN,
    History,
    OffsetCommit,
    OffsetRead,
    Read,
    Write,
    parse_ctp,
)

KINDS = (
    "lost", "duplicate", "phantom", "aborted-read", "torn", "divergent-read", "vanished",
    "unprocessed", "processed-twice", "processed-uncommitted", "offset-regressed",
    "replica-divergence", "hanging-transaction",
)
EXAMPLES = 5  # per kind, in the summary


@dataclass(frozen=True)
class Anomaly:
    kind: str
    detail: str


@dataclass
class Result:
    anomalies: list[Anomaly] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not self.anomalies

    def by_kind(self) -> dict[str, int]:
        return dict(Counter(a.kind for a in self.anomalies))

    def summary(self) -> str:
        lines = [" ".join(f"{k}={v}" for k, v in self.stats.items())]
        if self.valid:
            lines.append("no anomalies")
        for kind, count in self.by_kind().items():
            lines.append(f"{kind}: {count}")
            lines += [f"  {a.detail}" for a in self.anomalies if a.kind == kind][:EXAMPLES]
        return "\n".join(lines)


def check(history: History) -> Result:
    writer = _index_writes(history.writes)
    anomalies = [
        *check_reads(history.writes, writer, history.reads),
        *check_processing(history, writer),
        *check_offsets(history.offset_commits, history.offset_reads, history.final_offsets),
        *check_replicas(history.replicas),
        *(Anomaly("hanging-transaction", f"{p}: read_committed end stuck below the log end")
          for p in history.hanging),
    ]
    return Result(anomalies, _stats(history))


def _index_writes(writes: list[Write]) -> dict[str, Write]:
    writer: dict[str, Write] = {}
    for w in writes:
        for v in w.values:
            if v in writer:
                raise ValueError(f"value {v!r} written by both {writer[v].id} and {w.id}: the "
                                 "workload must make every value unique")
            writer[v] = w
    return writer


def check_reads(writes: list[Write], writer: dict[str, Write], reads: list[Read]
                ) -> list[Anomaly]:
    out: list[Anomaly] = []
    final_at: dict[str, set[tuple[str, int, int]]] = defaultdict(set)
    at_position: dict[tuple[str, int, int], set[str]] = defaultdict(set)
    seen_live: dict[str, Read] = {}
    for r in reads:
        at_position[(r.topic, r.partition, r.offset)].add(r.value)
        if r.reader == FINAL:
            final_at[r.value].add((r.topic, r.partition, r.offset))
        else:
            seen_live.setdefault(r.value, r)
    for value, where in final_at.items():
        if len(where) > 1:
            out.append(Anomaly("duplicate", f"{value!r} at {sorted(where)}"))
    for pos, values in at_position.items():
        if len(values) > 1:
            out.append(Anomaly("divergent-read", f"{pos[0]}-{pos[1]}@{pos[2]} read as "
                                                 f"{sorted(values)}"))
    phantoms = sorted({r.value for r in reads if r.value not in writer})
    out += [Anomaly("phantom", f"{v!r} read, never written") for v in phantoms]
    for w in writes:
        visible = [v for v in w.values if v in final_at]
        seen = [v for v in w.values if v in final_at or v in seen_live]
        if w.outcome == ABORTED and seen:
            out.append(Anomaly("aborted-read", f"aborted {w.id}: {len(seen)} of "
                                               f"{len(w.values)} records visible"))
            continue
        if w.outcome == COMMITTED and len(visible) < len(w.values):
            out.append(Anomaly("lost", f"committed {w.id}: {len(w.values) - len(visible)} of "
                                       f"{len(w.values)} records missing"))
        if 0 < len(visible) < len(w.values):
            out.append(Anomaly("torn", f"{w.outcome} {w.id}: {len(visible)} of "
                                       f"{len(w.values)} records visible"))
    for value, r in seen_live.items():
        w = writer.get(value)
        if value not in final_at and w is not None and w.outcome != ABORTED:
            out.append(Anomaly("vanished", f"{value!r} seen by {r.reader} at "
                                           f"{r.topic}-{r.partition}@{r.offset}, gone at the end"))
    return out


def check_processing(history: History, writer: dict[str, Write]) -> list[Anomaly]:
    """Consume-transform-produce: the final read of the output against the input topic and the
    group's final committed offsets."""
    if not history.input_topic:
        return []
    inputs: dict[int, set[int]] = defaultdict(set)
    processed: dict[int, Counter[int]] = defaultdict(Counter)
    for r in history.reads:
        if r.reader != FINAL:
            continue
        if r.topic == history.input_topic:
            inputs[r.partition].add(r.offset)
        elif (src := parse_ctp(r.value)) is not None and r.value in writer:
            processed[src[0]][src[1]] += 1
    out: list[Anomaly] = []
    for p in sorted(set(inputs) | set(processed)):
        committed = history.final_offsets.get(p, NO_OFFSET)
        done = processed[p]
        for o in sorted(inputs[p]):
            n = done.get(o, 0)
            if o < committed and n == 0:
                out.append(Anomaly("unprocessed", f"{history.input_topic}-{p}@{o} is below "
                                                  f"the committed offset {committed}, no output"))
            elif n > 1:
                out.append(Anomaly("processed-twice", f"{history.input_topic}-{p}@{o}: "
                                                      f"{n} outputs"))
            elif o >= committed and n:
                out.append(Anomaly("processed-uncommitted",
                                   f"{history.input_topic}-{p}@{o} has an output but the "
                                   f"committed offset is {committed}"))
        for o in sorted(set(done) - inputs[p]):
            out.append(Anomaly("phantom", f"output of {history.input_topic}-{p}@{o}, which "
                                          "the input topic does not hold"))
    return out


def check_offsets(commits: list[OffsetCommit], reads: list[OffsetRead],
                  final: dict[int, int]) -> list[Anomaly]:
    """A read must show at least what was acknowledged, and what an earlier read showed, before
    it began; the final offsets at least every acknowledged commit."""
    out: list[Anomaly] = []
    for p in sorted({c.partition for c in commits} | {r.partition for r in reads}):
        acked = sorted((c.at, c.offset) for c in commits if c.partition == p)
        acked_at = [a for a, _ in acked]
        acked_max = _running_max([o for _, o in acked])
        mine = [r for r in reads if r.partition == p]
        ended = sorted((r.end, r.offset) for r in mine)
        ended_at = [e for e, _ in ended]
        ended_max = _running_max([o for _, o in ended])
        for r in sorted(mine, key=lambda r: r.start):
            i = bisect.bisect_right(acked_at, r.start)
            j = bisect.bisect_right(ended_at, r.start)
            floor = max(acked_max[i - 1] if i else NO_OFFSET, ended_max[j - 1] if j else NO_OFFSET)
            if r.offset < floor:
                out.append(Anomaly("offset-regressed", f"partition {p}: read {r.offset} at "
                                                       f"{r.start:.3f}, earlier {floor}"))
        if acked and p in final and final[p] < acked_max[-1]:
            out.append(Anomaly("offset-regressed", f"partition {p}: final {final[p]}, "
                                                   f"acknowledged {acked_max[-1]}"))
    return out


def _running_max(values: list[int]) -> list[int]:
    out, best = [], NO_OFFSET
    for v in values:
        best = max(best, v)
        out.append(best)
    return out


def check_replicas(replicas: dict[str, dict[str, list[tuple]]]) -> list[Anomaly]:
    out: list[Anomaly] = []
    for name, by_replica in sorted(replicas.items()):
        (first, a), *rest = sorted(by_replica.items())
        for other, b in rest:
            if a != b:
                at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                          min(len(a), len(b)))
                out.append(Anomaly("replica-divergence", f"{name}: {first} has {len(a)} "
                                   f"records, {other} {len(b)}; first difference at index {at}"))
    return out


def _stats(history: History) -> dict[str, int]:
    txns = [w for w in history.writes if w.transactional]
    singles = [w for w in history.writes if not w.transactional]
    count = Counter(w.outcome for w in txns)
    return {
        "txn_committed": count[COMMITTED], "txn_aborted": count[ABORTED],
        "txn_unknown": count[UNKNOWN],
        "txn_records": sum(len(w.values) for w in txns if w.outcome == COMMITTED),
        "records_acked": sum(w.outcome == COMMITTED for w in singles),
        "records_unacked": sum(w.outcome != COMMITTED for w in singles),
        "records_read": sum(r.reader == FINAL for r in history.reads),
        "live_reads": sum(r.reader != FINAL for r in history.reads),
        "offset_reads": len(history.offset_reads),
    }
