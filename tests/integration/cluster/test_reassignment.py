"""Partition reassignment on a real cluster, driven through `strom reassign-partitions` (Kafka's
JSON files) and the AlterPartitionReassignments / ListPartitionReassignments APIs.

What Kafka promises: the replication factor can be raised and partitions moved to other brokers
while producers keep writing with acks=all, no acknowledged record is lost, the new replicas end
up identical to each other, the brokers that no longer hold a partition delete their copy, and a
reassignment under way survives the death of the controller.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from strom.cli.wire import Cluster as WireCluster

from .faults import (
    NumberedProducer,
    check_exactly_once_in_order,
    compare_replicas,
    read_all,
    wait_for,
)


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _partitions(bootstrap: str, topic: str):
    t = _admin(bootstrap).list_topics(topic, timeout=10).topics.get(topic)
    return {} if t is None or t.error is not None else t.partitions


def _create(cluster, name: str, replicas: list[list[int]], config: dict | None = None) -> None:
    wait_for(lambda: len(_admin(cluster.bootstrap).list_topics(timeout=10).brokers)
             == len(cluster.brokers), 30, "every broker registered")
    admin = _admin(cluster.bootstrap)
    topic = NewTopic(name, len(replicas), replica_assignment=replicas, config=config or {})
    admin.create_topics([topic], operation_timeout=30)[name].result(40)
    wait_for(lambda: _assigned(cluster.bootstrap, name) == {
        p: (r, sorted(r)) for p, r in enumerate(replicas)}, 30, "full ISRs")


def _assigned(bootstrap: str, topic: str) -> dict[int, tuple[list[int], list[int]]]:
    """partition -> (replicas, sorted ISR) as Metadata shows them."""
    return {n: (list(p.replicas), sorted(p.isrs))
            for n, p in _partitions(bootstrap, topic).items()}


def _strom(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    strom = Path(sys.executable).with_name("strom")
    done = subprocess.run([str(strom), *args], capture_output=True, text=True, timeout=120)
    if check:
        assert done.returncode == 0, (done.stdout, done.stderr)
    return done


def _plan_file(tmp_path: Path, name: str, moves: dict[tuple[str, int], list[int]]) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for (t, p), r in moves.items()]}))
    return str(path)


def _cluster_view(bootstrap: str) -> tuple[int, int]:
    """(live brokers, controller id) as the broker at ``bootstrap`` sees them."""
    wire = WireCluster.connect(bootstrap, 10)
    try:
        return len(wire.brokers), wire.controller
    finally:
        wire.close()


def _http(url: str) -> tuple[int, dict]:
    """GET a JSON body of the HTTP API (status and body, errors too)."""
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def _ongoing(bootstrap: str) -> dict:
    wire = WireCluster.connect(bootstrap, 10)
    try:
        conn = wire.any_conn()
        resp = conn.call(46, 0, {"timeout": 10_000, "topics": None})
        assert resp.error_code == 0
        return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas),
                                              list(p.removing_replicas))
                for t in resp.topics for p in t.partitions}
    finally:
        wire.close()


def _local_dirs(cluster, topic: str, partition: int) -> list[int]:
    return [i for i, b in enumerate(cluster.brokers, 1)
            if (b.data_dir / f"{topic}-{partition}").exists()]


@pytest.mark.timeout(240)
def test_raise_replication_factor_and_move_partitions_under_acks_all_load(make_cluster,
                                                                          tmp_path):
    cluster = make_cluster(4)
    # "mv": two partitions on brokers 1 and 2 (RF 2); "rf": one partition on broker 1 (RF 1)
    _create(cluster, "mv", [[1, 2], [2, 1]], {"min.insync.replicas": "1"})
    _create(cluster, "rf", [[1]])
    producers = {t: NumberedProducer(cluster.bootstrap, t, n, rate_per_s=200)
                 for t, n in (("mv", 2), ("rf", 1))}
    for producer in producers.values():
        producer.start()
    wait_for(lambda: all(p.total_acked() >= 200 for p in producers.values()), 30,
             "some acknowledged records")

    # --generate proposes a spread over the given brokers, keeping each topic's RF
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": "mv"}]}))
    out = _strom("reassign-partitions", "--generate", "--topics-to-move-json-file",
                 str(topics_file), "--broker-list", "3,4", "-b", cluster.bootstrap).stdout
    current, proposed = (json.loads(line) for line in out.splitlines() if line.startswith("{"))
    assert {(e["topic"], e["partition"]): e["replicas"] for e in current["partitions"]} == {
        ("mv", 0): [1, 2], ("mv", 1): [2, 1]}
    assert all(sorted(e["replicas"]) == [3, 4] for e in proposed["partitions"])

    # move mv's partitions to brokers 3 and 4, and give rf three replicas
    moves = {("mv", 0): [3, 4], ("mv", 1): [4, 3], ("rf", 0): [1, 3, 4]}
    plan = _plan_file(tmp_path, "plan.json", moves)
    out = _strom("reassign-partitions", "--execute", "--reassignment-json-file", plan,
                 "--wait", "-b", cluster.bootstrap).stdout
    assert "Save this to use as the --reassignment-json-file option during rollback" in out
    assert "Successfully started partition reassignments for mv-0,mv-1,rf-0" in out
    rollback = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    assert {(e["topic"], e["partition"]): e["replicas"] for e in rollback["partitions"]} == \
        {("mv", 0): [1, 2], ("mv", 1): [2, 1], ("rf", 0): [1]}

    verify = _strom("reassign-partitions", "--verify", "--reassignment-json-file", plan,
                    "-b", cluster.bootstrap).stdout
    for name in ("mv-0", "mv-1", "rf-0"):
        assert f"Reassignment of partition {name} is completed." in verify
    wait_for(lambda: _assigned(cluster.bootstrap, "mv") == {0: ([3, 4], [3, 4]),
                                                             1: ([4, 3], [3, 4])}, 30,
             "metadata showing mv's new replicas, all in sync")
    wait_for(lambda: _assigned(cluster.bootstrap, "rf") == {0: ([1, 3, 4], [1, 3, 4])}, 30,
             "rf with three replicas in sync")
    assert _ongoing(cluster.bootstrap) == {}
    assert "No partition reassignments found." in _strom(
        "reassign-partitions", "--list", "-b", cluster.bootstrap).stdout
    # the brokers that lost a partition deleted their copy
    wait_for(lambda: _local_dirs(cluster, "mv", 0) == [3, 4], 30, "mv-0 only on brokers 3, 4")
    wait_for(lambda: _local_dirs(cluster, "mv", 1) == [3, 4], 30, "mv-1 only on brokers 3, 4")
    assert _local_dirs(cluster, "rf", 0) == [1, 3, 4]

    for producer in producers.values():
        acked = producer.total_acked()
        wait_for(lambda p=producer, a=acked: p.total_acked() >= a + 200, 120,
                 "progress on the new replicas")
    for topic, producer in producers.items():
        left = producer.stop()
        assert left == 0 and producer.fatal is None, (left, producer.fatal)
        assert not producer.failed, producer.failed[:5]
        check_exactly_once_in_order(producer.acked,
                                    read_all(cluster.bootstrap, topic, producer.partitions))
    wait_for(lambda: all(len(isr) == len(r) for t in ("mv", "rf") for r, isr in
                         _assigned(cluster.bootstrap, t).values()), 30, "full ISRs")
    for b in cluster.brokers:
        b.stop()
    compare_replicas([cluster.broker(i).data_dir / "mv-0" for i in (3, 4)])
    compare_replicas([cluster.broker(i).data_dir / "mv-1" for i in (3, 4)])
    compare_replicas([cluster.broker(i).data_dir / "rf-0" for i in (1, 3, 4)])


# With one broker frozen and the controller killed, a KRaft quorum of three has lost its
# majority: this failover is ZooKeeper mode's (test_kraft_cluster.py kills a KRaft controller).
@pytest.mark.zookeeper_only
@pytest.mark.timeout(240)
def test_reassignment_survives_controller_failover_and_can_be_listed_and_cancelled(
        make_cluster, tmp_path):
    cluster = make_cluster(3, {"rest.listeners": "http://127.0.0.1:0"})  # listed over HTTP too
    meta = _admin(cluster.bootstrap).list_topics(timeout=10)
    controller = meta.controller_id
    a, b = (i for i in (1, 2, 3) if i != controller)
    _create(cluster, "fo", [[a], [a]])
    producer = NumberedProducer(cluster.bootstrap, "fo", 2, rate_per_s=200)
    producer.start()
    wait_for(lambda: producer.total_acked() >= 200, 30, "some acknowledged records")

    # Broker b is frozen: it is still registered, so the reassignment is accepted, but it cannot
    # catch up, so the reassignment stays under way.
    os.kill(cluster.broker(b).pid, signal.SIGSTOP)
    try:
        plan = _plan_file(tmp_path, "plan.json", {("fo", 0): [a, b], ("fo", 1): [b, a]})
        _strom("reassign-partitions", "--execute", "--reassignment-json-file", plan,
               "-b", cluster.broker(a).bootstrap)
        assert _ongoing(cluster.broker(a).bootstrap) == {
            ("fo", 0): ([a, b], [b], []), ("fo", 1): ([b, a], [b], [])}
        listed = _strom("reassign-partitions", "--list", "-b", cluster.broker(a).bootstrap).stdout
        assert f"fo-0: replicas: {a},{b}. adding: {b}. removing: ." in listed
        # the HTTP API's reassignments and the broker's replicas (Confluent's v3)
        http = cluster.broker(a).started_url("HTTP API")
        v3 = f"{http}/v3/clusters/{_http(f'{http}/v3/clusters')[1]['data'][0]['cluster_id']}"
        status, body = _http(f"{v3}/topics/-/partitions/-/reassignment")
        assert status == 200 and [(r["topic_name"], r["partition_id"], r["adding_replicas"],
                                   r["removing_replicas"]) for r in body["data"]] == [
            ("fo", 0, [b], []), ("fo", 1, [b], [])], body
        assert _http(f"{v3}/topics/fo/partitions/-/reassignment")[1]["data"] == body["data"]
        status, one = _http(f"{v3}/topics/fo/partitions/1/reassignment")
        assert status == 200 and one == body["data"][1]
        assert one["metadata"]["resource_name"].endswith("/topic=fo/partition=1/reassignment")
        status, mine = _http(f"{v3}/brokers/{a}/partition-replicas")
        assert status == 200 and [(r["topic_name"], r["partition_id"], r["is_leader"])
                                  for r in mine["data"] if r["topic_name"] == "fo"] == [
            ("fo", 0, True), ("fo", 1, True)]
        verify = _strom("reassign-partitions", "--verify", "--reassignment-json-file", plan,
                        "-b", cluster.broker(a).bootstrap, check=False)
        assert verify.returncode == 1 and "fo-0 is still in progress" in verify.stdout
        # a second request without --additional is refused while one is under way
        other = _plan_file(tmp_path, "other.json", {("fo", 0): [a]})
        again = _strom("reassign-partitions", "--execute", "--reassignment-json-file", other,
                       "-b", cluster.broker(a).bootstrap, check=False)
        assert again.returncode != 0 and "--additional" in again.stderr

        # the controller dies; another takes over and the reassignment is still under way
        cluster.broker(controller).kill()
        wait_for(lambda: _admin(cluster.broker(a).bootstrap).list_topics(
            timeout=10).controller_id == a, 30, f"broker {a} the new controller")
        assert set(_ongoing(cluster.broker(a).bootstrap)) == {("fo", 0), ("fo", 1)}
    finally:
        os.kill(cluster.broker(b).pid, signal.SIGCONT)

    # broker b wakes up (registering again if its session ended), catches up, and the new
    # controller completes the reassignment
    wait_for(lambda: _ongoing(cluster.broker(a).bootstrap) == {}, 60, "the reassignment done")
    assert _http(f"{v3}/topics/-/partitions/-/reassignment")[1]["data"] == []
    assert _http(f"{v3}/topics/fo/partitions/1/reassignment")[0] == 404
    wait_for(lambda: _assigned(cluster.broker(a).bootstrap, "fo") == {
        0: ([a, b], sorted([a, b])), 1: ([b, a], sorted([a, b]))}, 30, "new replicas in sync")
    done = _strom("reassign-partitions", "--verify", "--reassignment-json-file", plan,
                  "-b", cluster.broker(a).bootstrap).stdout
    assert "fo-0 is completed" in done and "fo-1 is completed" in done

    # cancelling a finished reassignment says there is nothing to cancel
    cancel = _strom("reassign-partitions", "--cancel", "--reassignment-json-file", plan,
                    "-b", cluster.broker(a).bootstrap).stdout
    assert "No reassignment was under way for: fo-0,fo-1" in cancel

    left = producer.stop()
    assert left == 0 and producer.fatal is None, (left, producer.fatal)
    check_exactly_once_in_order(producer.acked, read_all(cluster.broker(a).bootstrap, "fo", 2))
    for broker in cluster.brokers:
        broker.stop()
    for p in range(2):
        compare_replicas([cluster.broker(i).data_dir / f"fo-{p}" for i in (a, b)])


@pytest.mark.timeout(180)
def test_cancel_goes_back_to_the_original_replicas_and_bad_requests_get_kafka_errors(
        make_cluster, tmp_path):
    # The target broker is frozen while three CLI commands run; on a loaded machine that can
    # outlast the tests' 4 s session, and a broker whose session expired is no longer a target.
    cluster = make_cluster(3, {"zookeeper.session.timeout.ms": 30_000})
    _create(cluster, "cx", [[1]])
    boot = cluster.broker(1).bootstrap
    # every broker, the controller among them, must know every other is alive before one freezes
    wait_for(lambda: all(_cluster_view(b.bootstrap)[0] == 3 for b in cluster.brokers), 30,
             "3 live brokers everywhere")
    # Freeze a broker that is not the controller: the reassignment requests go to the controller.
    controller = _cluster_view(boot)[1]
    target = 3 if controller != 3 else 2
    os.kill(cluster.broker(target).pid, signal.SIGSTOP)  # so the reassignment cannot finish
    try:
        plan = _plan_file(tmp_path, "plan.json", {("cx", 0): [target]})
        _strom("reassign-partitions", "--execute", "--reassignment-json-file", plan, "-b", boot)
        assert _ongoing(boot) == {("cx", 0): ([target, 1], [target], [1])}
        out = _strom("reassign-partitions", "--cancel", "--reassignment-json-file", plan,
                     "-b", boot).stdout
        assert "Successfully cancelled partition reassignments for: cx-0" in out
        assert _ongoing(boot) == {}
        assert _assigned(boot, "cx")[0] == ([1], [1])
    finally:
        os.kill(cluster.broker(target).pid, signal.SIGCONT)
    # the target no longer holds a copy once it notices
    wait_for(lambda: _local_dirs(cluster, "cx", 0) == [1], 30, "cx-0 only on broker 1")

    wire = WireCluster.connect(boot, 10)
    try:
        conn = wire.any_conn()

        def alter(partitions, version=1, allow=True):
            resp = conn.call(45, version, {
                "timeout": 10_000, "allow_replication_factor_change": allow,
                "topics": [{"name": t, "partitions": [
                    {"partition_index": p, "replicas": r} for p, r in parts]}
                    for t, parts in partitions]})
            assert resp.error_code == 0
            return {(t.name, p.partition_index): p.error_code
                    for t in resp.responses for p in t.partitions}

        assert alter([("cx", [(0, [1, 9])])]) == {("cx", 0): 39}  # INVALID_REPLICA_ASSIGNMENT
        assert alter([("cx", [(0, [1, 1])])]) == {("cx", 0): 39}
        assert alter([("cx", [(0, [])])]) == {("cx", 0): 39}
        assert alter([("cx", [(7, [1])])]) == {("cx", 7): 3}  # UNKNOWN_TOPIC_OR_PARTITION
        assert alter([("nope", [(0, [1])])]) == {("nope", 0): 3}
        assert alter([("cx", [(0, None)])]) == {("cx", 0): 85}  # NO_REASSIGNMENT_IN_PROGRESS
        # KIP-860: a replication factor change refused when the request does not allow it
        assert alter([("cx", [(0, [1, 2])])], allow=False) == {("cx", 0): 38}
        assert alter([("cx", [(0, [2])])], allow=False) == {("cx", 0): 0}
    finally:
        wire.close()
    wait_for(lambda: _assigned(boot, "cx")[0] == ([2], [2]), 30, "cx-0 moved to broker 2")
    bad = _strom("reassign-partitions", "--execute", "--reassignment-json-file",
                 _plan_file(tmp_path, "bad.json", {("cx", 0): [5]}), "-b", boot, check=False)
    assert bad.returncode == 1 and "unknown broker(s) [5]" in bad.stderr
    assert bad.stderr.count("\n") == 1, bad.stderr
