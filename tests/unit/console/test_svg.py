"""Charts as SVG: scales, the y-axis ceiling, and what the template draws."""

from __future__ import annotations

import pytest

from strom.console.svg import (
    HEIGHT,
    PAD_BOTTOM,
    PAD_LEFT,
    PAD_RIGHT,
    PAD_TOP,
    WIDTH,
    line_chart,
    nice_ceiling,
    polyline_points,
)


@pytest.mark.parametrize(("value", "ceiling"), [
    (0, 1.0), (-3, 1.0), (0.3, 0.5), (1, 1.0), (1.2, 2.0), (4.9, 5.0), (7, 10.0), (10, 10.0),
    (101, 200.0), (5000, 5000.0)])
def test_nice_ceiling(value: float, ceiling: float) -> None:
    assert nice_ceiling(value) == pytest.approx(ceiling)


def test_points_span_the_plot_box() -> None:
    text = polyline_points([(0.0, 0.0), (50.0, 5.0), (100.0, 10.0), (150.0, 99.0)], 0.0, 100.0,
                           10.0)
    pts = [tuple(map(float, p.split(","))) for p in text.split()]
    left, right = PAD_LEFT, WIDTH - PAD_RIGHT
    top, bottom = PAD_TOP, HEIGHT - PAD_BOTTOM
    assert pts[0] == (left, bottom)
    assert pts[1] == ((left + right) / 2, (top + bottom) / 2)
    assert pts[2] == (right, top)
    assert pts[3] == (right, top)  # clamped into the box


def test_line_chart() -> None:
    now = 10_000.0
    chart = line_chart("Lag", "records", {"a": [(now - 20, 3.0), (now - 10, 7.0)], "b": []}, now)
    assert chart.y_max == 10.0
    assert [line.count for line in chart.lines] == [2, 0]
    assert chart.lines[0].last == 7.0 and chart.lines[1].last is None
    assert chart.lines[0].color != chart.lines[1].color
    assert not chart.empty
    # the time axis starts at the first sample when that is less than an hour ago
    assert chart.lines[0].points.split()[0].startswith(f"{PAD_LEFT:.1f},")
    assert chart.start_label == "02:46:20 UTC" and chart.end_label == "02:46:40 UTC"


def test_empty_chart() -> None:
    chart = line_chart("In", "records/s", {"in": []}, 7200.0)
    assert chart.empty and chart.y_max == 1.0 and chart.lines[0].points == ""
    assert chart.start_label == "01:00:00 UTC"
