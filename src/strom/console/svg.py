"""Line charts as inline SVG, computed on the server: no JavaScript and nothing from a CDN.

The template draws what `line_chart` returns: one polyline per series, in a fixed box, with the
time axis running over the last hour (or since the first sample, if that is later).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

from strom.console.sampler import Point

WIDTH, HEIGHT = 600, 160
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 56, 8, 8, 20
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")


@dataclass(frozen=True)
class Polyline:
    name: str
    color: str
    points: str  # the SVG `points` attribute: "x,y x,y ..."
    count: int
    last: float | None


@dataclass(frozen=True)
class Chart:
    title: str
    unit: str
    lines: tuple[Polyline, ...]
    y_max: float
    start_label: str
    end_label: str
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def plot_left(self) -> int:
        return PAD_LEFT

    @property
    def plot_bottom(self) -> int:
        return self.height - PAD_BOTTOM

    @property
    def plot_right(self) -> int:
        return self.width - PAD_RIGHT

    @property
    def empty(self) -> bool:
        return not any(line.count for line in self.lines)


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is >= value (1 for nothing)."""
    if value <= 0 or math.isnan(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value * (1 - 1e-9):
            return float(step * power)
    return 10.0 * power  # pragma: no cover - the loop always returns


def polyline_points(points: list[Point], t0: float, t1: float, y_max: float,
                    width: int = WIDTH, height: int = HEIGHT) -> str:
    """Data points scaled into the plot box (time left to right, value bottom to top)."""
    left, right = PAD_LEFT, width - PAD_RIGHT
    top, bottom = PAD_TOP, height - PAD_BOTTOM
    span = max(t1 - t0, 1e-9)
    out = []
    for t, v in points:
        x = left + (min(max(t, t0), t1) - t0) / span * (right - left)
        y = bottom - min(max(v, 0.0), y_max) / y_max * (bottom - top)
        out.append(f"{x:.1f},{y:.1f}")
    return " ".join(out)


def line_chart(title: str, unit: str, series: dict[str, list[Point]], now: float,
               span: float = 3600.0) -> Chart:
    """A chart of the series (name -> points) over [max(now - span, first point), now]."""
    firsts = [pts[0][0] for pts in series.values() if pts]
    t0 = max(now - span, min(firsts)) if firsts else now - span
    t1 = now if now > t0 else t0 + 1
    y_max = nice_ceiling(max((v for pts in series.values() for _, v in pts), default=0.0))
    lines = tuple(
        Polyline(name, COLORS[i % len(COLORS)], polyline_points(pts, t0, t1, y_max),
                 len(pts), pts[-1][1] if pts else None)
        for i, (name, pts) in enumerate(series.items()))
    return Chart(title, unit, lines, y_max, _clock(t0), _clock(t1))


def _clock(t: float) -> str:
    return dt.datetime.fromtimestamp(t, tz=dt.UTC).strftime("%H:%M:%S UTC")
