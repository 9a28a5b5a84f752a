"""A picture of one benchmark run: Strom/peer ratios, and throughput and latency per broker.

A run may have several peers (Tansu and Kafka): the ratio panel has a bar per peer and row, the
other panels a bar per broker.

The numbers come either from the run itself (the outcomes the markdown report is built from) or
from a saved report's table, so the chart of any result in docs/bench-results can be redrawn
without running the benchmark again:

    python -m bench.chart docs/bench-results/REPORT.md [-o CHART.svg]

Shaping the data is pure and unit-tested; only :func:`draw` needs matplotlib, imported there so
the harness itself runs without it.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench import report
from bench.report import Outcome, ScenarioRows, Stat

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.patches import Patch

# Units of the table's rows, as build_rows prints them after the metric: "produce (MB/s)".
HIGHER_IS_BETTER = frozenset({"MB/s", "records/s", "records/broker-CPU-s"})
LOWER_IS_BETTER = frozenset({"ms", "s", "MB", "% of a core"})
THROUGHPUT_UNIT = "MB/s"
LATENCY_UNIT = "ms"


@dataclass(frozen=True)
class Entry:
    """One row of the report: a scenario's metric with every broker's median and range."""

    scenario: str  # the table's scenario title
    metric: str  # as the table prints it, unit included: "produce (MB/s)"
    unit: str  # one of the known units above, or "" (a count, or a unit the chart ignores)
    subject: Stat | None
    peers: tuple[Stat | None, ...]  # in the order of ChartData.peers
    judged: bool  # the row has a target

    @property
    def peer(self) -> Stat | None:
        """The first peer's numbers."""
        return self.peers[0] if self.peers else None

    def ratio_to(self, i: int) -> float | None:
        """subject / the i-th peer, by medians."""
        p = self.peers[i] if i < len(self.peers) else None
        return report.ratio(self.subject.median if self.subject else None, p.median if p else None)

    @property
    def ratio(self) -> float | None:
        return self.ratio_to(0)

    def better_than(self, i: int) -> bool | None:
        """Whether the subject's median beats the i-th peer's; None without a ratio or unit."""
        r = self.ratio_to(i)
        if r is None:
            return None
        if self.unit in HIGHER_IS_BETTER:
            return r > 1
        if self.unit in LOWER_IS_BETTER:
            return r < 1
        return None

    @property
    def subject_better(self) -> bool | None:
        return self.better_than(0)


@dataclass(frozen=True)
class ChartData:
    title: str
    subject: str
    peers: tuple[str, ...]
    entries: tuple[Entry, ...]

    @property
    def peer(self) -> str:
        return self.peers[0] if self.peers else ""


def metric_text(label: str, unit: str) -> str:
    """The metric column's text, as report.build_rows writes it."""
    return f"{label} ({unit})" if unit else label


def from_results(
    scenarios: Sequence[ScenarioRows],
    runs: Mapping[str, Mapping[str, Sequence[Outcome]]],
    subject: str,
    peers: str | Sequence[str],
    title: str,
) -> ChartData:
    """The chart's data from a run's outcomes: the same cells the markdown table shows."""
    names = (peers,) if isinstance(peers, str) else tuple(peers)
    entries = []
    for sc in scenarios:
        by_broker = runs.get(sc.name, {})
        for m in sc.metrics:
            entries.append(
                Entry(
                    scenario=sc.title,
                    metric=metric_text(m.label, m.unit),
                    unit=m.unit if m.unit in HIGHER_IS_BETTER | LOWER_IS_BETTER else "",
                    subject=report.cell(by_broker.get(subject, ()), m).stat,
                    peers=tuple(report.cell(by_broker.get(p, ()), m).stat for p in names),
                    judged=bool(report.applicable(m, names)),
                )
            )
    return ChartData(title, subject, names, tuple(entries))


_NUMBER = r"[\d,]+(?:\.\d+)?"
_CELL = re.compile(rf"^(?P<med>{_NUMBER})(?: \((?P<lo>{_NUMBER})-(?P<hi>{_NUMBER})\))?$")
_UNIT = re.compile(r"^.* \((?P<unit>[^()]*)\)$")
_SPLIT = re.compile(r"(?<!\\)\|")  # a cell's own "|" is escaped as "\|"


def parse_cell(text: str, n: int) -> Stat | None:
    """'1,171,503 (812,090-1,177,886)' or '754.9' to a Stat; None for FAILED, n/a or '-'."""
    m = _CELL.match(text.strip())
    if m is None:
        return None
    med = float(m["med"].replace(",", ""))
    if m["lo"] is None:
        return Stat(med, med, med, n)
    return Stat(med, float(m["lo"].replace(",", "")), float(m["hi"].replace(",", "")), n)


def parse_unit(metric: str) -> str:
    m = _UNIT.match(metric)
    unit = m["unit"] if m else ""
    return unit if unit in HIGHER_IS_BETTER | LOWER_IS_BETTER else ""


def from_markdown(text: str) -> ChartData:
    """The chart's data from a saved report (the output of ``python -m bench``)."""
    lines = text.splitlines()
    start = next(
        (i for i, line in enumerate(lines) if line.startswith("| Scenario | Metric |")), None
    )
    if start is None:
        raise ValueError("no '| Scenario | Metric |' table: not a python -m bench report")
    head = [c.strip() for c in _SPLIT.split(lines[start])[1:-1]]
    brokers = [h.removesuffix(" median (min-max)") for h in head if h.endswith(" median (min-max)")]
    subject, peers = brokers[0], tuple(brokers[1:])
    target_col = 2 + len(brokers) + len(peers)  # after the brokers' cells and the ratios
    rounds = re.search(r"^- Rounds: (\d+)", text, re.MULTILINE)
    n = int(rounds[1]) if rounds else 0
    entries, scenario = [], ""
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in _SPLIT.split(line)[1:-1]]
        scenario = cells[0] or scenario
        entries.append(
            Entry(
                scenario=scenario,
                metric=cells[1],
                unit=parse_unit(cells[1]),
                subject=parse_cell(cells[2], n),
                peers=tuple(parse_cell(c, n) for c in cells[3 : 2 + len(brokers)]),
                judged=bool(cells[target_col]),
            )
        )
    return ChartData(title_from_report(text), subject, peers, tuple(entries))


def title_from_report(text: str) -> str:
    """Two lines from the report's header: who, when, which commit; machine, load and rounds."""

    def find(pattern: str) -> str:
        m = re.search(pattern, text, re.MULTILINE)
        return m[1].strip() if m else ""

    heading = find(r"^# (.+)$")
    brokers = find(r"^- Brokers: (.+)$")
    # Each peer's version follows its bold name: "vs. **Tansu** tansu 0.6.0 (...)".
    peer_version = ", ".join(
        v.strip() for v in re.findall(r"(?:vs\.|and) \*\*[^*]+\*\* ([^(]+) \(", brokers)
    )
    commit = find(r"commit ([0-9a-f]{7,40})")
    machine = find(r"^- Machine: ([^;]+)")
    rounds = find(r"^- Rounds: (\d+)")
    first = heading + (f" ({peer_version})" if peer_version else "")
    first += f", commit {commit}" if commit else ""
    second = machine + (f"; {rounds} round(s), bars are medians" if rounds else "")
    return f"{first}\n{second}".strip()


def short_scenario(title: str) -> str:
    """A label that fits under a bar: '1 KiB acks=all' for 'produce+consume 1 KiB, 6 ...'."""
    m = re.match(r"produce\+consume (?P<size>[^,]+),.*\b(?P<acks>acks=\w+)", title)
    if m:
        return f"{m['size']} {m['acks']}"
    return re.split(r", |: | \(", title, maxsplit=1)[0].strip()


@dataclass(frozen=True)
class Bar:
    """One bar of the ratio panel."""

    label: str
    ratio: float
    subject_better: bool | None
    peer: int = 0  # which peer the ratio is to (index into ChartData.peers)


def ratio_bars(entries: Sequence[Entry], peers: Sequence[str] = ()) -> list[Bar]:
    """The judged rows that have a ratio, in the table's order, one bar per peer.

    With more than one peer each label says which peer its ratio is to.
    """
    n = max((len(e.peers) for e in entries), default=0)
    bars = []
    for e in entries:
        if not e.judged:
            continue
        for i in range(n):
            r = e.ratio_to(i)
            if r is None:
                continue
            label = f"{short_scenario(e.scenario)}: {e.metric}"
            if n > 1:
                label += f" / {peers[i] if i < len(peers) else f'peer {i + 1}'}"
            bars.append(Bar(label, r, e.better_than(i), i))
    return bars


@dataclass(frozen=True)
class Group:
    """Bars side by side, one per broker, for one scenario's metric."""

    label: str
    subject: Stat | None
    peers: tuple[Stat | None, ...]

    @property
    def peer(self) -> Stat | None:
        return self.peers[0] if self.peers else None


def broker_groups(entries: Sequence[Entry], unit: str) -> list[Group]:
    """Every row in ``unit`` that at least one broker measured."""
    return [
        Group(
            f"{short_scenario(e.scenario)}: {e.metric.removesuffix(f' ({unit})')}",
            e.subject,
            e.peers,
        )
        for e in entries
        if e.unit == unit and (e.subject or any(e.peers))
    ]


SUBJECT_COLOUR, PEER_COLOUR = "#3b6ea5", "#a0a0a0"
PEER_COLOURS = (PEER_COLOUR, "#d9a441", "#7f6a9f")  # first peer grey as before, then the others
BETTER_COLOUR, WORSE_COLOUR = "#2e8b57", "#c0392b"
FONT = 9


def draw(data: ChartData, out: Path) -> None:
    """Write the figure to ``out`` (SVG or PNG, by its suffix)."""
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    bars = ratio_bars(data.entries, data.peers)
    fig = Figure(figsize=(13, max(8.0, 0.25 * len(bars) + 2.0)), layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(2, 2, width_ratios=(1, 1))
    fig.suptitle(data.title, fontsize=FONT + 2)
    _ratios(fig.add_subplot(grid[:, 0]), bars, data)
    for row, unit, what, ylabel, log in (
        (0, THROUGHPUT_UNIT, "(b) throughput", "MB/s (10^6 bytes of record values)", False),
        (1, LATENCY_UNIT, "(c) latency", "ms (log scale)", True),
    ):
        groups = broker_groups(data.entries, unit)
        _pairs(fig.add_subplot(grid[row, 1]), groups, data, what, ylabel, log=log)
    out.parent.mkdir(parents=True, exist_ok=True)
    # No date and no random ids in an SVG: the same report always gives the same file.
    with rc_context({"svg.hashsalt": "strom-bench"}):
        fig.savefig(out, metadata={"Date": None} if out.suffix == ".svg" else None, dpi=100)


def _number(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def _ratios(ax: Axes, bars: Sequence[Bar], data: ChartData) -> None:
    from matplotlib.transforms import offset_copy

    vs = "/".join(data.peers) if len(data.peers) > 1 else data.peer
    ax.set_title(f"(a) {data.subject}/{vs}, medians (the rows with a target)", fontsize=FONT + 1)
    if not bars:
        ax.text(0.5, 0.5, "no judged row has both brokers' numbers", ha="center")
        return
    ys = list(range(len(bars)))
    ratios = [b.ratio for b in bars]
    colours = [
        BETTER_COLOUR if b.subject_better else WORSE_COLOUR if b.subject_better is False else "grey"
        for b in bars
    ]
    # Bars grow from 1.0: right when the subject's number is larger, left when smaller.
    ax.barh(ys, [r - 1 for r in ratios], left=1, color=colours, height=0.7)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlim(min(*ratios, 1) / 30, max(*ratios, 1) * 5)  # room for the labels
    for y, r in zip(ys, ratios, strict=True):
        right = r >= 1
        ax.text(
            r * (1.1 if right else 1 / 1.1),
            y,
            report.format_ratio(r),
            va="center",
            ha="left" if right else "right",
            fontsize=FONT - 1,
        )
    ax.set_yticks(ys, [b.label for b in bars], fontsize=FONT)
    ax.invert_yaxis()
    ax.set_xlabel(f"{data.subject}/peer (log scale; 1 = the same)", fontsize=FONT)
    ax.grid(axis="x", alpha=0.3)
    better = f"{data.subject} better (higher rate; lower time, latency, RSS)"
    ax.legend(
        handles=_patches((BETTER_COLOUR, better), (WORSE_COLOUR, "the peer better")),
        loc="upper center",
        # A fixed distance under the axis, below its label: clear of every bar.
        bbox_to_anchor=(0.5, 0.0),
        bbox_transform=offset_copy(ax.transAxes, ax.figure, y=-36, units="points"),
        fontsize=FONT - 1,
    )


def _patches(*items: tuple[str, str]) -> list[Patch]:
    from matplotlib.patches import Patch

    return [Patch(color=colour, label=label) for colour, label in items]


def _pairs(
    ax: Axes, groups: Sequence[Group], data: ChartData, what: str, ylabel: str, *, log: bool
) -> None:
    ax.set_title(f"{what} per broker: median, whiskers min-max", fontsize=FONT + 1)
    if not groups:
        ax.text(0.5, 0.5, "not measured in this run", ha="center", transform=ax.transAxes)
        return
    brokers = 1 + len(data.peers)
    width = 0.8 / brokers
    colours = [
        SUBJECT_COLOUR,
        *(PEER_COLOURS[i % len(PEER_COLOURS)] for i in range(len(data.peers))),
    ]
    columns = [[g.subject for g in groups]]
    columns += [
        [g.peers[i] if i < len(g.peers) else None for g in groups] for i in range(len(data.peers))
    ]
    sides = [
        ((k - (brokers - 1) / 2) * width, colours[k], stats) for k, stats in enumerate(columns)
    ]
    for offset, colour, stats in sides:
        measured = [(x + offset, s) for x, s in enumerate(stats) if s is not None]
        for x, s in enumerate(stats):
            if s is None:
                ax.text(
                    x + offset,
                    0.02,
                    "none",
                    rotation=90,
                    ha="center",
                    va="bottom",
                    fontsize=FONT - 2,
                    transform=ax.get_xaxis_transform(),
                )
        ax.bar(
            [x for x, _ in measured],
            [s.median for _, s in measured],
            width,
            color=colour,
            yerr=[[s.median - s.lo for _, s in measured], [s.hi - s.median for _, s in measured]],
            capsize=2,
            error_kw={"linewidth": 0.8},
        )
        if log:  # a log axis is hard to read off: print the medians
            for x, s in measured:
                ax.text(
                    x, s.hi * 1.2, _number(s.median), ha="center", va="bottom", fontsize=FONT - 2
                )
    if log:
        ax.set_yscale("log")
        lows = [s.lo for g in groups for s in (g.subject, *g.peers) if s and s.lo > 0]
        highs = [s.hi for g in groups for s in (g.subject, *g.peers) if s and s.hi > 0]
        if lows and highs:  # room above the whiskers for the printed medians
            ax.set_ylim(min(lows) / 3, max(highs) * 6)
    ax.set_xticks(
        range(len(groups)),
        [g.label for g in groups],
        fontsize=FONT - 1,
        rotation=35,
        ha="right",
        rotation_mode="anchor",
    )
    ax.set_ylabel(ylabel, fontsize=FONT)
    ax.legend(
        handles=_patches(*zip(colours, (data.subject, *data.peers), strict=True)),
        fontsize=FONT - 1,
    )
    ax.grid(axis="y", alpha=0.3)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.chart", description="Draw the chart of a saved bench report."
    )
    ap.add_argument("report", type=Path, help="a markdown report of python -m bench")
    ap.add_argument("-o", "--out", type=Path, help="SVG or PNG to write (default: REPORT.svg)")
    args = ap.parse_args(argv)
    out = args.out or args.report.with_suffix(".svg")
    try:
        data = from_markdown(args.report.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"{args.report}: {e}") from None
    draw(data, out)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
