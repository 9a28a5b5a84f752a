"""A 3-broker cluster on ZooKeeper: membership, controller, replicated topics, failover."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.timeout(180)


def _metadata(bootstrap: str):
    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as exc:  # a broker mid-failover: keep asking until the deadline
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def _create(bootstrap: str, name: str, partitions: int, rf: int, config=None):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, partitions, rf, config=config or {})],
                              operation_timeout=30, request_timeout=30)[name]
    fut.result(40)


def test_every_broker_knows_every_broker_and_the_controller(make_cluster):
    cluster = make_cluster(3)
    seen = []
    for b in cluster.brokers:
        md = _wait(lambda b=b: (m := _metadata(b.bootstrap)) and len(m.brokers) == 3 and m,
                   30, f"3 brokers in metadata from {b.name}")
        seen.append((sorted(md.brokers), md.controller_id))
    assert {s[0] == [1, 2, 3] for s in seen} == {True}
    assert len({s[1] for s in seen}) == 1 and seen[0][1] in (1, 2, 3)


def test_replicated_topic_is_the_same_everywhere(make_cluster):
    cluster = make_cluster(3)
    _wait(lambda: len(_metadata(cluster.bootstrap).brokers) == 3, 30, "3 brokers")
    _create(cluster.brokers[0].bootstrap, "rf3", 6, 3)
    views = []
    for b in cluster.brokers:
        def ready(b=b):
            t = _metadata(b.bootstrap).topics.get("rf3")
            return t is not None and len(t.partitions) == 6 and all(
                p.leader >= 1 and len(p.isrs) == 3 for p in t.partitions.values()) and t
        t = _wait(ready, 30, f"rf3 on {b.name}")
        views.append({p: (q.leader, sorted(q.replicas), sorted(q.isrs))
                      for p, q in t.partitions.items()})
    assert views[0] == views[1] == views[2]
    leaders = {v[0] for v in views[0].values()}
    assert leaders == {1, 2, 3}  # leaders spread over the brokers
    with pytest.raises(Exception, match=r"INVALID_REPLICATION_FACTOR|replication factor"):
        _create(cluster.brokers[1].bootstrap, "rf4", 1, 4)
