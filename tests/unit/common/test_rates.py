import pytest

from strom.common.rates import SampledRate


def test_a_first_burst_is_spread_over_the_whole_window() -> None:
    rate = SampledRate(samples=11, window_s=1.0)
    rate.record(10_000, now=100.0)
    assert rate.span(100.0) == pytest.approx(10.0)  # padded to samples - 1 windows
    assert rate.measure(100.0) == pytest.approx(1_000)


def test_a_steady_rate_is_measured_as_it_is() -> None:
    rate = SampledRate(samples=11, window_s=1.0)
    now = 0.0
    for _ in range(60):  # one minute at 500 per second, 10 records a second
        for _ in range(10):
            rate.record(50, now)
            now += 0.1
    assert rate.measure(now) == pytest.approx(500, rel=0.06)


def test_old_samples_stop_counting() -> None:
    rate = SampledRate(samples=3, window_s=1.0)
    rate.record(900, now=0.0)
    assert rate.measure(0.5) == pytest.approx(360)  # 900 over 0.5 s padded by 2 windows
    assert rate.measure(10.0) == 0
    assert rate.idle_since(10.0) >= 10.0


def test_taking_back_a_value() -> None:
    rate = SampledRate(samples=11, window_s=1.0)
    rate.record(1000, now=5.0)
    rate.record(-1000, now=5.1)
    assert rate.measure(5.2) == 0
