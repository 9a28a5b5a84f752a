"""The sampler's arithmetic and memory: rates from counter growth, a bounded hour of samples."""

from __future__ import annotations

import threading
import time

import pytest

from strom.console.sampler import History, Observation, Sampler, growth_rates, sample_of


def obs(at: float, ends: dict[str, int], committed: dict[str, int] | None = None,
        lag: dict[str, int] | None = None) -> Observation:
    return Observation(at, ends, committed or {}, lag or {})


def test_growth_rates() -> None:
    assert growth_rates({"a": 10, "b": 5}, {"a": 30, "b": 5, "c": 9}, 10.0) == {"a": 2.0, "b": 0.0}
    # a topic recreated (offsets went down) grew by nothing
    assert growth_rates({"a": 100}, {"a": 3}, 1.0) == {"a": 0.0}
    assert growth_rates({"a": 1}, {"a": 2}, 0.0) == {}


def test_sample_of_first_and_next_reading() -> None:
    first = obs(100.0, {"t": 50}, {"g": 10}, {"g": 40})
    assert sample_of(None, first).in_rate == {}
    assert sample_of(None, first).lag == {"g": 40}
    s = sample_of(first, obs(102.0, {"t": 70}, {"g": 16}, {"g": 54}))
    assert (s.at, s.in_rate, s.out_rate, s.lag) == (102.0, {"t": 10.0}, {"g": 3.0}, {"g": 54})


def test_history_is_bounded_to_an_hour() -> None:
    history = History(interval=10.0)
    assert history.capacity == 360
    for i in range(1000):
        history.add(obs(float(i * 10), {"t": i * 5}, {"g": i}, {"g": 7}))
    samples = history.samples()
    assert len(samples) == 360
    assert samples[0].at == 6400.0 and samples[-1].at == 9990.0
    assert history.in_total()[-1] == (9990.0, 0.5)
    assert history.out_total()[-1] == (9990.0, 0.1)
    assert history.in_topic("t")[0] == (6400.0, 0.5)
    assert history.lag("g")[-1] == (9990.0, 7.0)
    assert history.in_topic("other") == [] and history.lag("other") == []


def test_bytes_in_from_log_sizes() -> None:
    history = History(interval=1.0)
    history.add(Observation(1.0, {"t": 0}, {}, {}, {"t": 1000}))
    history.add(Observation(3.0, {"t": 4}, {}, {}, {"t": 5000}))
    history.add(Observation(4.0, {"t": 8}, {}, {}, {"t": 100}))  # retention deleted a segment
    history.add(Observation(5.0, {"t": 9}, {}, {}))  # sizes not readable this time
    assert history.in_bytes_total() == [(3.0, 2000.0), (4.0, 0.0)]


def test_history_series_skip_the_first_reading_for_rates() -> None:
    history = History(interval=1.0)
    history.add(obs(1.0, {"t": 0}, {"g": 0}, {"g": 5}))
    assert history.in_total() == [] and history.lag("g") == [(1.0, 5.0)]
    history.add(obs(2.0, {"t": 4}, {"g": 1}, {"g": 8, "h": 1}))
    assert history.in_total() == [(2.0, 4.0)]
    assert history.groups() == ["g", "h"]  # most lagging first


def test_sampler_reads_on_its_thread_and_survives_failures() -> None:
    history = History(interval=0.05)
    calls = []
    done = threading.Event()

    def read() -> Observation:
        calls.append(time.time())
        if len(calls) == 2:
            raise RuntimeError("broker away")
        if len(calls) >= 4:
            done.set()
        return obs(time.time(), {"t": len(calls)})

    sampler = Sampler(read, history)
    sampler.start()
    try:
        assert done.wait(10), "the sampler did not keep reading"
    finally:
        sampler.stop()
    assert len(history.samples()) >= 3  # the failed reading was skipped


def test_interval_must_leave_at_least_two_samples() -> None:
    assert History(interval=7200.0).capacity == 2
    with pytest.raises(ValueError, match="must be positive"):
        History(interval=0.0)
