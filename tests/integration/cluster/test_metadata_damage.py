"""A cluster's damaged metadata never deletes data: a topic znode that cannot be decoded leaves
the running brokers' copies in place, and a broker started meanwhile (its image lacks the topic)
neither deletes nor renames its copy; once the znode is readable again it serves and replicates
the same directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic
from kazoo.client import KazooClient

from .. import clients as kc
from .conftest import Cluster
from .faults import wait_for

pytestmark = pytest.mark.timeout(240)

SEGMENT = "00000000000000000000.log"


def _copies(cluster: Cluster, topic: str) -> list[Path]:
    return [b.data_dir / f"{topic}-0" / SEGMENT for b in cluster.brokers]


def _replicated(cluster: Cluster, topic: str, size: int | None = None) -> bool:
    sizes = {p.stat().st_size if p.exists() else -1 for p in _copies(cluster, topic)}
    return len(sizes) == 1 and sizes.pop() > 0 and (size is None or
                                                    _copies(cluster, topic)[0].stat().st_size > size)


@pytest.mark.zookeeper_only
def test_an_unreadable_topic_znode_deletes_and_renames_nothing(make_cluster, unique_topic):
    cluster = make_cluster(3)
    bs, topic = cluster.bootstrap, unique_topic()
    admin = kc.admin(bs)  # kept alive until the future resolves
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    kc.wait_for_topic(bs, topic, 1)
    first = [kc.Msg(b"k", f"v{i}".encode()) for i in range(20)]
    kc.produce(bs, topic, first, partition=0, acks="all")
    wait_for(lambda: _replicated(cluster, topic), 30, "three copies of the records")
    size = _copies(cluster, topic)[0].stat().st_size

    third = cluster.broker(3)
    assert third.stop() == 0
    zk = KazooClient(hosts=cluster.connect, timeout=10)
    zk.start(timeout=10)
    try:
        path = f"/brokers/topics/{topic}"
        znode = zk.get(path)[0]
        marks = [b.log_size() for b in cluster.brokers]
        zk.set(path, b"\x00{garbled")
        for b, mark in zip(cluster.brokers[:2], marks[:2], strict=True):  # the running brokers
            wait_for(lambda b=b, mark=mark: "unreadable topic znode" in b.log_text(since=mark),
                     30, f"{b.name} reading the garbled znode")
        third.start()  # its image lacks the topic
        log = third.log_text(since=marks[2])
        assert "stray detection skipped" in log and topic in log, log
        for copy in _copies(cluster, topic):
            assert copy.stat().st_size == size, copy
        assert not [p for b in cluster.brokers for p in b.data_dir.iterdir()
                    if p.name.endswith(("-stray", "-delete"))]

        zk.set(path, znode)  # readable again
    finally:
        zk.stop()
        zk.close()
    more = [kc.Msg(b"k", f"w{i}".encode()) for i in range(5)]
    kc.produce(cluster.bootstrap, topic, more, partition=0, acks="all")
    got = kc.consume(cluster.bootstrap, topic, len(first) + len(more), offset=0)
    assert [m.value for m in got] == [m.value for m in first + more]
    # the third broker took its own directory back and follows again
    wait_for(lambda: _replicated(cluster, topic, size), 30, "the third copy to catch up")
