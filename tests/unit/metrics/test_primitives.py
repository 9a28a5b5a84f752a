from strom.metrics.primitives import MS_BUCKETS, Histogram


def test_observations_land_in_the_first_bucket_whose_bound_holds_them() -> None:
    h = Histogram((1.0, 10.0, 100.0))
    for v in (0.5, 1.0, 1.5, 10.0, 99.0, 1000.0):
        h.observe(v)
    snap = h.snapshot()
    assert snap.bounds == (1.0, 10.0, 100.0)
    assert snap.cumulative == (2, 4, 5, 6)  # <=1, <=10, <=100, +Inf
    assert snap.count == 6
    assert snap.total == 0.5 + 1.0 + 1.5 + 10.0 + 99.0 + 1000.0


def test_an_empty_histogram_has_zero_counts_everywhere() -> None:
    snap = Histogram().snapshot()
    assert snap.bounds == MS_BUCKETS
    assert snap.cumulative == (0,) * (len(MS_BUCKETS) + 1)
    assert snap.total == 0


def test_the_default_buckets_grow_and_reach_half_a_minute() -> None:
    assert list(MS_BUCKETS) == sorted(MS_BUCKETS)
    assert MS_BUCKETS[0] < 1 and MS_BUCKETS[-1] == 30000
