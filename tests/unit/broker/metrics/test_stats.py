from strom.broker.metrics.stats import PHASES, BrokerStats
from strom.protocol.api_keys import ApiKey


def test_topics_count_batches_and_bytes() -> None:
    stats = BrokerStats()
    stats.produced("a", 10, 1000)
    stats.produced("a", 5, 400)
    stats.produce_failed("a")
    stats.fetched("a", 700)
    stats.replicated_out("a", 1400)
    assert stats.topic("a").as_dict() == {
        "messages_in": 15, "bytes_in": 1400, "bytes_out": 700, "replication_bytes_out": 1400,
        "produce_requests": 3, "fetch_requests": 1, "failed_produce_requests": 1}
    stats.forget_topic("a")
    assert "a" not in stats.topics


def test_a_request_is_counted_per_version_with_its_phases_in_milliseconds() -> None:
    stats = BrokerStats()
    stats.request_done(ApiKey.PRODUCE, 9, 0.001, 0.002, 0.010, 0.0005)
    stats.request_done(ApiKey.PRODUCE, 11, 0.0, 0.001, 0.0, 0.0)
    api = stats.api(ApiKey.PRODUCE)
    assert api.requests == {9: 1, 11: 1}
    totals = {phase: h.snapshot().total for phase, h in zip(PHASES, api.phases, strict=True)}
    assert abs(totals["requestqueuetimems"] - 1.0) < 1e-9
    assert abs(totals["localtimems"] - 3.0) < 1e-9
    assert abs(totals["remotetimems"] - 10.0) < 1e-9
    assert abs(totals["totaltimems"] - 14.5) < 1e-9
    assert all(h.snapshot().count == 2 for h in api.phases)
