"""kafka-reassign-partitions with ``log_dirs`` in its plan on a broker with two log.dirs: the
tool moves the replica between the broker's log directories through the Java Admin's
alterReplicaLogDirs, ``--verify`` follows the move through describeReplicaLogDirs, and
kafka-log-dirs shows the partition in its new directory."""

from __future__ import annotations

import json
import time

import pytest

from .. import clients as kc
from .tools import unique

pytestmark = pytest.mark.timeout(180)


def _log_dirs(kafka_tools, bs: str, topic: str) -> dict[str, list[tuple[str, bool]]]:
    out = kafka_tools.run("kafka-log-dirs", "--bootstrap-server", bs, "--describe",
                          "--topic-list", topic).stdout
    [entry] = json.loads(out.splitlines()[2])["brokers"]
    return {d["logDir"]: [(p["partition"], p["isFuture"]) for p in d["partitions"]]
            for d in entry["logDirs"]}


def test_reassign_partitions_moves_a_replica_to_another_log_dir(kafka_tools, make_broker,
                                                                tmp_path, tools_file):
    dirs = [str((tmp_path / name).absolute()) for name in ("d1", "d2")]
    broker = make_broker({"log.dirs": ",".join(dirs)})
    bs, topic = broker.bootstrap, unique("logdir-move")
    kc.create_topic(bs, topic, 1)
    sent = kc.produce(bs, topic, [kc.Msg(b"k", b"v%d" % i) for i in range(50)], partition=0)
    [source] = [d for d, parts in _log_dirs(kafka_tools, bs, topic).items() if parts]
    [target] = [d for d in dirs if d != source]
    plan = tools_file("plan.json", json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [0], "log_dirs": [target]}]}))

    def reassign(*args: str) -> str:
        return kafka_tools.run("kafka-reassign-partitions", "--bootstrap-server", bs,
                               "--reassignment-json-file", str(plan), *args).stdout

    out = reassign("--execute")
    assert (f"Successfully started moving log directory to {target} for replica {topic}-0 "
            "with broker 0") in out, out
    deadline = time.monotonic() + 60
    while f"Reassignment of replica {topic}-0-0 completed successfully." not in \
            (text := reassign("--verify")):  # fmt: skip
        assert time.monotonic() < deadline, text
        time.sleep(0.2)  # poll interval, not synchronisation
    assert _log_dirs(kafka_tools, bs, topic) == {source: [], target: [(f"{topic}-0", False)]}
    assert [m.value for m in kc.read_partition(bs, topic)] == [m.value for m in sent]
