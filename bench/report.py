"""Pure report logic: medians, ranges, ratios, targets and the markdown table.

No I/O and no Kafka here, so the arithmetic that decides "pass" has a unit test.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass
class Outcome:
    """One run of one scenario against one broker.

    ``metrics`` holds the numbers measured; ``failed`` is set when the run must not count
    (wrong record count, error, timeout); ``na`` maps a metric to why it cannot be measured on
    this broker (e.g. restart of an in-memory broker).
    """

    metrics: dict[str, float] = field(default_factory=dict)
    failed: str | None = None
    na: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Stat:
    median: float
    lo: float
    hi: float
    n: int


def summarize(values: Sequence[float]) -> Stat | None:
    """Median and min-max of the runs; None when there are none."""
    if not values:
        return None
    return Stat(statistics.median(values), min(values), max(values), len(values))


def ratio(subject: float | None, peer: float | None) -> float | None:
    """subject / peer, or None if either is missing or the peer is zero."""
    if subject is None or peer is None or peer == 0:
        return None
    return subject / peer


@dataclass(frozen=True)
class Target:
    """A goal for the subject broker's median.

    kinds: ``ratio_min``/``ratio_max`` compare subject/peer with ``value``; ``max``/``min``
    compare the subject's median itself; ``ref_min`` compares subject / refs[ref] (the client's
    ceiling) with ``value``.
    """

    kind: str
    value: float
    ref: str | None = None
    # The peer a ratio target compares with, by its label ("Tansu", "Kafka"); None: the first
    # peer of the sitting. A target whose peer did not run is left out of the table.
    peer: str | None = None
    ref_label: str = "client ceiling"  # what refs[ref] is, for the Target column

    def describe(self, peer: str, unit: str = "") -> str:
        v = f"{self.value:g}"
        if self.kind == "ratio_min":
            return f">= {v}x {peer}"
        if self.kind == "ratio_max":
            return f"<= {v}x {peer}"
        if self.kind == "max":
            return f"<= {v} {unit}".rstrip()
        if self.kind == "min":
            return f">= {v} {unit}".rstrip()
        if self.kind == "ref_min":
            return f">= {v}x {self.ref_label}"
        raise ValueError(self.kind)

    def check(
        self, subject: float | None, peer: float | None, refs: Mapping[str, float]
    ) -> bool | None:
        """True/False, or None when a needed number is missing."""
        if subject is None:
            return None
        if self.kind in ("ratio_min", "ratio_max"):
            r = ratio(subject, peer)
            if r is None:
                return None
            return r >= self.value if self.kind == "ratio_min" else r <= self.value
        if self.kind == "max":
            return subject <= self.value
        if self.kind == "min":
            return subject >= self.value
        if self.kind == "ref_min":
            ref = refs.get(self.ref or "")
            if not ref:
                return None
            return subject / ref >= self.value
        raise ValueError(self.kind)


@dataclass(frozen=True)
class Metric:
    """One row of the table: which number, how to print it, and its target if any."""

    key: str
    label: str
    unit: str = ""
    digits: int = 1
    target: Target | tuple[Target, ...] | None = None  # one goal, or one per peer
    # Key into refs of the client's ceiling for this row: the notes then say how close each
    # broker came to it, so a client-bound result reads as such.
    ceiling: str | None = None
    # Key into refs of the ceiling that also serves a delivery report per record: the part of
    # the client's work that a broker's run cannot avoid and the plain ceiling leaves out.
    reported_ceiling: str | None = None
    # Key of the metric holding the client process's CPU use (% of a core) during this phase:
    # the notes show it, since a client near 100% is the bottleneck.
    client_cpu: str | None = None

    @property
    def targets(self) -> tuple[Target, ...]:
        if self.target is None:
            return ()
        return self.target if isinstance(self.target, tuple) else (self.target,)


@dataclass(frozen=True)
class ScenarioRows:
    name: str
    title: str
    metrics: tuple[Metric, ...]


@dataclass
class Cell:
    stat: Stat | None
    text: str
    note: str = ""


def _fmt(x: float, digits: int) -> str:
    if abs(x) >= 10_000:
        return f"{x:,.0f}"
    return f"{x:,.{digits}f}"


def cell(outcomes: Sequence[Outcome], metric: Metric) -> Cell:
    """Median (min-max) of ``metric`` over ``outcomes``, or FAILED / n/a with the reason."""
    if not outcomes:
        return Cell(None, "-", "not run")
    failed = [o.failed for o in outcomes if o.failed]
    if failed:
        return Cell(None, f"FAILED ({len(failed)}/{len(outcomes)})", failed[0])
    na = [o.na[metric.key] for o in outcomes if metric.key in o.na]
    if na:
        return Cell(None, "n/a", na[0])
    stat = summarize([o.metrics[metric.key] for o in outcomes if metric.key in o.metrics])
    if stat is None:
        return Cell(None, "-", "not measured")
    if stat.n == 1:
        return Cell(stat, _fmt(stat.median, metric.digits))
    lo, hi = _fmt(stat.lo, metric.digits), _fmt(stat.hi, metric.digits)
    return Cell(stat, f"{_fmt(stat.median, metric.digits)} ({lo}-{hi})")


@dataclass(frozen=True)
class Row:
    scenario: str
    metric: str
    subject: str
    peers: tuple[str, ...]  # each peer's cell, in the table's order
    ratios: tuple[str, ...]  # subject/peer for each peer
    target: str  # every goal of the row, "; "-separated
    verdict: str  # "pass", "FAIL", "?" or "" per goal, "; "-separated like the targets
    notes: str

    @property
    def peer(self) -> str:
        """The first peer's cell (ratio goals that name no peer are judged against it)."""
        return self.peers[0] if self.peers else ""

    @property
    def ratio(self) -> str:
        return self.ratios[0] if self.ratios else "-"


def _names(peers: str | Sequence[str]) -> tuple[str, ...]:
    return (peers,) if isinstance(peers, str) else tuple(peers)


def applicable(metric: Metric, peers: Sequence[str]) -> tuple[Target, ...]:
    """The metric's goals this sitting can judge: a ratio goal needs its peer to have run."""
    return tuple(t for t in metric.targets
                 if not t.kind.startswith("ratio") or (t.peer or (peers[0] if peers else "")) in peers)


def build_rows(
    scenarios: Sequence[ScenarioRows],
    runs: Mapping[str, Mapping[str, Sequence[Outcome]]],
    subject: str,
    peers: str | Sequence[str],
    refs: Mapping[str, float],
) -> list[Row]:
    """One :class:`Row` per scenario metric, in order, with a ratio per peer and the verdicts.

    A target that compares with a peer (``ratio_min``/``ratio_max``) is judged against the peer
    it names (or the first peer if it names none), and is left out when that peer did not run.
    """
    names = _names(peers)
    rows = []
    for sc in scenarios:
        by_broker = runs.get(sc.name, {})
        first = True
        said: set[str] = set()  # a reason is given once per scenario, on its first row
        for m in sc.metrics:
            s = cell(by_broker.get(subject, ()), m)
            ps = [cell(by_broker.get(name, ()), m) for name in names]
            sm = s.stat.median if s.stat else None
            pms = [p.stat.median if p.stat else None for p in ps]
            goals, verdicts = [], []
            for t in applicable(m, names):
                judge = t.peer or (names[0] if names else "")
                pm = pms[names.index(judge)] if judge in names else None
                ok = t.check(sm, pm, refs)
                goals.append(t.describe(judge, m.unit))
                verdicts.append("FAIL" if s.text.startswith("FAILED")
                                else "?" if ok is None else "pass" if ok else "FAIL")
            everyone = [(subject, s), *zip(names, ps, strict=True)]
            notes = []
            if s.note and all(c.note == s.note for _, c in everyone):
                notes.append(f"{'both' if len(everyone) == 2 else 'all'}: {s.note}")
            else:
                notes += [f"{who}: {c.note}" for who, c in everyone if c.note]
            notes = [n for n in notes if n not in said]
            said.update(notes)
            for key, what in (
                (m.ceiling, "of client ceiling"),
                (m.reported_ceiling, "of the ceiling with delivery reports"),
            ):
                if key and refs.get(key):
                    parts = [
                        f"{who} {c.stat.median / refs[key]:.0%}"
                        for who, c in everyone
                        if c.stat is not None
                    ]
                    if parts:
                        notes.append(f"{what}: " + ", ".join(parts))
            if m.client_cpu:
                busy = [
                    f"{who} {c.stat.median:.0f}%"
                    for who, c in (
                        (who, cell(by_broker.get(who, ()), _pct(m.client_cpu)))
                        for who, _ in everyone
                    )
                    if c.stat is not None
                ]
                if busy:
                    notes.append("client CPU (% of a core): " + ", ".join(busy))
            rows.append(
                Row(
                    scenario=sc.title if first else "",
                    metric=f"{m.label} ({m.unit})" if m.unit else m.label,
                    subject=s.text,
                    peers=tuple(p.text for p in ps),
                    ratios=tuple(format_ratio(ratio(sm, pm)) for pm in pms),
                    target="; ".join(goals),
                    verdict="; ".join(verdicts),
                    notes="; ".join(notes),
                )
            )
            first = False
    return rows


def format_ratio(r: float | None) -> str:
    if r is None:
        return "-"
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x"


def _pct(key: str) -> Metric:
    return Metric(key, key, "%", 0)


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[Row], subject: str, peers: str | Sequence[str]) -> str:
    """Scenario, metric, every broker's cell, a ratio column per peer, target, verdict, notes."""
    names = _names(peers)
    head = [
        "Scenario",
        "Metric",
        f"{subject} median (min-max)",
        *(f"{peer} median (min-max)" for peer in names),
        *(f"{subject}/{peer}" for peer in names),
        "Target",
        "Pass",
        "Notes",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r.scenario, r.metric, r.subject, *r.peers, *r.ratios]
        cells += [r.target, r.verdict, r.notes]
        lines.append("| " + " | ".join(_escape(c) for c in cells) + " |")
    return "\n".join(lines)


def verdict_summary(rows: Sequence[Row]) -> str:
    """How many goals were met, counting each goal of a row with several."""
    judged = [v for r in rows if r.verdict for v in r.verdict.split("; ")]
    passed = judged.count("pass")
    failed = judged.count("FAIL")
    unknown = judged.count("?")
    text = f"Targets met: {passed} of {len(judged)}"
    if unknown:
        text += f" ({unknown} could not be judged)"
    return text + "." if not failed else text + f"; missed: {failed}."
