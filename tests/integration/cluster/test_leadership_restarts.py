"""Leadership across restarts (issue 28), on real brokers with real clients.

- A broker killed (-9) and restarted before its old session ends (the controller's, or
  ZooKeeper's with STROM_CLUSTER=zookeeper) finds itself the leader in the partition state:
  that leadership was its previous process's. It must take no write as leader until a new
  election, and every replica must be back in the ISR after. On KRaft nodes the restarted
  node may even be the active controller again before its broker registers.
- A broker that led an epoch without writing in it (leadership moved to it and away again
  with no produce in between) follows the next leader, which never saw that epoch: it must
  catch up instead of asking with that epoch for ever.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from ..wire import NONE, PRODUCE, Conn, parse_produce_v3, produce_v3_body, simple_batch
from .faults import replica_records, wait_for
from .test_reassignment import _assigned, _create

pytestmark = pytest.mark.timeout(180)


def _produce(bootstrap: str, topic: str, count: int) -> None:
    # idempotent: a retry on a loaded machine must not store a record twice (counted below)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                  "enable.idempotence": True})
    for i in range(count):
        p.produce(topic, f"v{i}".encode(), partition=0)
    assert p.flush(60) == 0


def _leader(bootstrap: str, topic: str) -> int:
    t = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic]
    return t.partitions[0].leader


def _write_as_leader(bootstrap: str, topic: str) -> int | None:
    """One acks=1 produce sent to this very broker: its error code (None: not listening)."""
    try:
        with Conn(bootstrap, timeout=5) as conn:
            body = produce_v3_body(topic, 0, simple_batch(b"stale?"), acks=1, timeout_ms=2000)
            return parse_produce_v3(conn.request(PRODUCE, 3, body))[(topic, 0)].error
    except OSError:
        return None


def test_a_restarted_leader_takes_no_write_before_a_new_election(make_cluster) -> None:
    # a session outliving the restart: the controller (or ZooKeeper) still sees the old process
    cluster = make_cluster(3, {"zookeeper.session.timeout.ms": 30000})
    topic = "inherited"
    _create(cluster, topic, [[1, 2, 3]])  # broker 1 leads
    _produce(cluster.bootstrap, topic, 20)
    victim, witness = cluster.broker(1), cluster.broker(2)
    victim.kill()
    victim.start(wait=False)  # at once: ZooKeeper still holds its old session
    deadline = time.monotonic() + 60
    answers = []
    while True:  # from the moment it listens until another broker shows a new leader
        code = _write_as_leader(victim.bootstrap, topic)
        if code is not None:
            answers.append(code)
            assert code != NONE, f"the restarted broker took a write as the leader it was " \
                f"(answers so far: {answers})"
        try:
            if _leader(witness.bootstrap, topic) not in (1, -1):
                break
        except Exception:  # KafkaException while the cluster settles
            pass
        assert time.monotonic() < deadline, f"no new leader elected; answers {answers}"
        time.sleep(0.02)  # poll interval, not synchronisation
    wait_for(lambda: _assigned(cluster.bootstrap, topic) == {0: ([1, 2, 3], [1, 2, 3])}, 60,
             "every replica back in the ISR")
    _produce(cluster.bootstrap, topic, 5)
    for b in cluster.brokers:  # all replicas hold the 25 records (and nothing else)
        wait_for(lambda b=b: len(replica_records(b.data_dir / f"{topic}-0")) == 25, 30,
                 f"{b.name} to hold all 25 records")


def test_a_follower_that_led_an_epoch_without_writing_catches_up(make_cluster) -> None:
    cluster = make_cluster(3)
    topic = "idle-epoch"
    _create(cluster, topic, [[1, 2, 3]])
    _produce(cluster.bootstrap, topic, 10)
    one = cluster.broker(1)
    one.stop()  # controlled shutdown: broker 2 leads a new epoch, and nothing is written in it
    wait_for(lambda: _leader(cluster.bootstrap, topic) == 2, 30, "broker 2 leading")
    one.start()
    wait_for(lambda: _assigned(cluster.bootstrap, topic) == {0: ([1, 2, 3], [1, 2, 3])}, 60,
             "broker 1 back in the ISR")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
    wait_for(lambda: _leader(cluster.bootstrap, topic) == 1, 30, "broker 1 leading again")
    _produce(cluster.bootstrap, topic, 10)  # broker 1 never saw broker 2's epoch
    for b in cluster.brokers:
        wait_for(lambda b=b: len(replica_records(b.data_dir / f"{topic}-0")) == 20, 30,
                 f"{b.name} to hold all 20 records")
    wait_for(lambda: _assigned(cluster.bootstrap, topic) == {0: ([1, 2, 3], [1, 2, 3])}, 30,
             "every replica in the ISR")
