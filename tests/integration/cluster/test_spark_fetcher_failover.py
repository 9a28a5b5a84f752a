"""The Spark source's native reader (strom.spark.fetcher) across a leader's kill -9: the read
learns the new leader from metadata and goes on, every record read once and in order."""

from __future__ import annotations

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.spark.consumer import ReadSettings, read_range
from strom.spark.fetcher import close_sessions, session_for
from strom.spark.offsets import OffsetRange

from .faults import wait_for

RECORDS = 3000


def test_a_native_read_follows_the_leader_after_a_kill(make_cluster) -> None:
    cluster = make_cluster(3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wait_for(lambda: len(admin.list_topics(timeout=10).brokers) == 3, 30, "3 live brokers")
    admin.create_topics([NewTopic("moves", 1, 3, config={"min.insync.replicas": "2"})],
                        operation_timeout=30)["moves"].result(40)

    def replicated() -> bool:
        t = admin.list_topics("moves", timeout=10).topics.get("moves")
        return t is not None and len(t.partitions[0].isrs) == 3 and t.partitions[0].leader > 0

    wait_for(replicated, 30, "a full ISR")
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(RECORDS):
        p.produce("moves", b"%d" % i, partition=0)
        if i % 100 == 99:  # batches of 100: a 4 KiB fetch then holds a few, not the whole log
            assert p.flush(30) == 0
    leader = admin.list_topics("moves", timeout=10).topics["moves"].partitions[0].leader
    settings = ReadSettings(params=(("bootstrap.servers", cluster.bootstrap),
                                    ("max.partition.fetch.bytes", "4096")),
                            group_id="g", native=True, batch_rows=100, poll_timeout_ms=60_000)
    try:
        reader = read_range(OffsetRange("moves", 0, 0, RECORDS), settings)
        first = next(reader)
        cluster.broker(leader).kill()
        rest = list(reader)
        learnt = session_for(settings.params).leaders[("moves", 0)]
        assert learnt.node != leader, "the read never moved to the new leader"
    finally:
        close_sessions()
    values = [v for b in [first, *rest] for v in b.column("value").to_pylist()]
    assert values == [b"%d" % i for i in range(RECORDS)]
