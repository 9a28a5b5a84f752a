"""KIP-951 on a 3-broker cluster: a Produce or Fetch sent to the wrong broker is answered with
the partition's current leader and that leader's endpoint, so a client can go there without a
metadata round trip. Raw requests (tests/integration/wire_flex.py), real broker processes."""

from __future__ import annotations

import pytest

from .. import wire_flex as wf
from ..wire import Conn, Record, build_batch
from .faults import wait_for

pytestmark = pytest.mark.timeout(180)

NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH = 6, 74
RACKS = ["rack-a", "rack-b", "rack-c"]


def _create(bootstrap: str, name: str, partitions: int, rf: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, rf)], operation_timeout=30,
                        request_timeout=30)[name].result(40)


def _leaders(cluster, bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """partition -> (leader, epoch) once every broker reports the same leaders."""
    def agreed():
        views = []
        for b in cluster.brokers:
            if not b.running:
                continue
            with Conn(b.bootstrap) as conn:
                md = wf.metadata_v12(conn, [topic]).get(topic)
            if md is None or len(md["partitions"]) != partitions:
                return None
            views.append({i: (leader, epoch) for i, (err, leader, epoch)
                          in md["partitions"].items() if err == 0 and leader > 0})
        return views[0] if all(v == views[0] and len(v) == partitions for v in views) else None
    return wait_for(agreed, 60, f"leaders of {topic} agreed on every broker")


def _topic_id(bootstrap: str, topic: str):
    with Conn(bootstrap) as conn:
        return wf.metadata_v12(conn, [topic])[topic]["id"]


def _endpoint(cluster, broker_id: int) -> tuple[int, str, int, str]:
    host, port = cluster.broker(broker_id).bootstrap.rsplit(":", 1)
    return broker_id, host, int(port), RACKS[broker_id - 1]


def _partition(response: dict) -> dict:
    [(_, [p])] = response["topics"]
    return p


def test_produce_and_fetch_at_a_follower_name_the_leader(make_cluster):
    cluster = make_cluster(3, racks=RACKS)
    _create(cluster.brokers[0].bootstrap, "hints", 1, 3)
    [(leader, epoch)] = _leaders(cluster, cluster.bootstrap, "hints", 1).values()
    follower = next(b for b in (1, 2, 3) if b != leader)
    batch = build_batch([Record(b"k", b"v")])
    topic_id = _topic_id(cluster.broker(follower).bootstrap, "hints")
    with Conn(cluster.broker(follower).bootstrap) as conn:
        p_new = wf.produce(conn, 10, "hints", 0, batch)
        p_old = wf.produce(conn, 9, "hints", 0, batch)
        f_new = wf.fetch(conn, 16, topic_id, 0, 0)
        f_old = wf.fetch(conn, 15, topic_id, 0, 0)
    # Produce v10+ (KIP-951): the leader, its epoch, its endpoint with the rack
    assert (_partition(p_new)["error"], _partition(p_new)["current_leader"]) == (
        NOT_LEADER_OR_FOLLOWER, (leader, epoch))
    assert p_new["node_endpoints"] == [_endpoint(cluster, leader)]
    assert (_partition(p_old)["error"], _partition(p_old)["current_leader"],
            p_old["node_endpoints"]) == (NOT_LEADER_OR_FOLLOWER, None, [])
    # Fetch v16+ the same; v12-15 carry the tag but Kafka leaves it unset
    assert (_partition(f_new)["error"], _partition(f_new)["current_leader"]) == (
        NOT_LEADER_OR_FOLLOWER, (leader, epoch))
    assert f_new["node_endpoints"] == [_endpoint(cluster, leader)]
    assert (_partition(f_old)["error"], _partition(f_old)["current_leader"],
            f_old["node_endpoints"]) == (NOT_LEADER_OR_FOLLOWER, None, [])


def test_a_broker_without_a_replica_names_the_leader(make_cluster):
    # Kafka answers NOT_LEADER_OR_FOLLOWER (not UNKNOWN_TOPIC_OR_PARTITION) for a partition it
    # knows but holds no replica of
    cluster = make_cluster(3, racks=RACKS)
    _create(cluster.brokers[0].bootstrap, "single", 3, 1)
    leaders = _leaders(cluster, cluster.bootstrap, "single", 3)
    topic_id = _topic_id(cluster.brokers[0].bootstrap, "single")
    for partition, (leader, epoch) in leaders.items():
        other = next(b for b in (1, 2, 3) if b != leader)
        with Conn(cluster.broker(other).bootstrap) as conn:
            f = wf.fetch(conn, 17, topic_id, partition, 0)
            p = wf.produce(conn, 11, "single", partition, build_batch([Record(b"k", b"v")]))
        for response in (f, p):
            assert (_partition(response)["error"], _partition(response)["current_leader"],
                    response["node_endpoints"]) == (
                NOT_LEADER_OR_FOLLOWER, (leader, epoch), [_endpoint(cluster, leader)])


def test_a_fenced_epoch_names_the_new_leader(make_cluster):
    cluster = make_cluster(3, racks=RACKS)
    _create(cluster.brokers[0].bootstrap, "moved", 1, 3)
    [(old_leader, old_epoch)] = _leaders(cluster, cluster.bootstrap, "moved", 1).values()
    cluster.broker(old_leader).stop()

    def moved():
        leaders = _leaders(cluster, cluster.bootstrap, "moved", 1)
        return leaders[0] if leaders[0][0] != old_leader else None
    new_leader, new_epoch = wait_for(moved, 60, "a new leader of moved-0")
    assert new_epoch > old_epoch
    topic_id = _topic_id(cluster.broker(new_leader).bootstrap, "moved")
    with Conn(cluster.broker(new_leader).bootstrap) as conn:
        f = wf.fetch(conn, 16, topic_id, 0, 0, current_leader_epoch=old_epoch)
    assert (_partition(f)["error"], _partition(f)["current_leader"]) == (
        FENCED_LEADER_EPOCH, (new_leader, new_epoch))
    assert f["node_endpoints"] == [_endpoint(cluster, new_leader)]
