"""AssignReplicasToDirs (KIP-858): which log dir keeps each replica.

- The controller keeps a broker's directory in the partition's record, answers Kafka's codes
  for what it cannot take (UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER
  for a broker that is not a replica; STALE_BROKER_EPOCH for the whole request), and leaves the
  partition epoch alone (an AlterPartition decided before still applies).
- The directories survive a snapshot (`image_records`) and leave with a replica that leaves.
- A registration's log dirs: none twice, none of another broker's (INVALID_REGISTRATION).
- The broker side (`DirectoryAssignments`) reports each local replica whose directory the
  metadata does not show, in one request, and nothing once the metadata shows them.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from strom.broker.dir_assignments import DirectoryAssignments
from strom.cluster import records as rec
from strom.cluster.image import MetadataImage
from strom.controller import broker_apis
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.checkpoints import topic_id_from_str, topic_id_to_str
from strom.storage.log import LogConfig
from strom.storage.manager import LogManager

from .test_broker_apis import Ctx, Node, decoded, registration
from .test_cluster_controller import Setup, run

DIR_A = topic_id_to_str(uuid.uuid4())
DIR_B = topic_id_to_str(uuid.uuid4())


def assign(broker_id: int, epoch: int, directory: str,
           partitions: dict[uuid.UUID, list[int]]) -> Any:
    return decoded(ApiKey.ASSIGN_REPLICAS_TO_DIRS, 0, {
        "broker_id": broker_id, "broker_epoch": epoch, "directories": [
            {"id_": topic_id_from_str(directory), "topics": [
                {"topic_id": t, "partitions": [{"partition_index": p} for p in parts]}
                for t, parts in partitions.items()]}]})


def errors(answer: dict[str, Any]) -> list[int]:
    return [p["error_code"] for d in answer["directories"] for t in d["topics"]
            for p in t["partitions"]]


def test_the_controller_keeps_each_replicas_directory() -> None:
    async def main() -> None:
        s = Setup()
        epochs = {b: await s.live_broker(b) for b in (1, 2, 3)}
        topic = await s.controller.create_topic("t", -1, -1, {0: [1, 2], 1: [2, 3]}, {})
        node = SimpleNamespace(cluster=s.controller, cluster_id="c", forwarded=None,
                               authorizer=None)
        before = s.image.topics["t"].partitions[0]

        answer = await broker_apis.assign_replicas_to_dirs(node, Ctx(), assign(
            1, epochs[1], DIR_A, {topic.topic_id: [0, 1, 7], uuid.uuid4(): [0]}))
        assert answer["error_code"] == ErrorCode.NONE
        assert errors(answer) == [ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                  ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID]
        after = s.image.topics["t"].partitions[0]
        assert after.directories == {1: DIR_A}
        assert s.image.topics["t"].partitions[1].directories == {}
        assert (after.partition_epoch, after.leader_epoch) == \
            (before.partition_epoch, before.leader_epoch)

        appended = len(s.quorum.appended)  # the same again writes nothing
        await broker_apis.assign_replicas_to_dirs(node, Ctx(), assign(
            1, epochs[1], DIR_A, {topic.topic_id: [0]}))
        assert len(s.quorum.appended) == appended
        stale = await broker_apis.assign_replicas_to_dirs(node, Ctx(), assign(
            1, epochs[1] - 1, DIR_B, {topic.topic_id: [0]}))
        assert stale["error_code"] == ErrorCode.STALE_BROKER_EPOCH
        assert s.image.topics["t"].partitions[0].directories == {1: DIR_A}

        # a snapshot keeps it; a replica that leaves takes its directory along
        rebuilt = MetadataImage(cluster_id="c")
        for record in rec.image_records(s.image):
            rec.apply(rebuilt, record)
        assert rebuilt.topics["t"].partitions[0].directories == {1: DIR_A}
        moved = dataclasses.replace(after, replicas=[2, 3])
        rec.apply(rebuilt, rec.partition_record(topic.topic_id, moved))
        assert rebuilt.topics["t"].partitions[0].directories == {}

    run(main)


def test_a_registration_may_not_repeat_or_take_another_brokers_log_dir() -> None:
    async def main() -> None:
        node = Node()
        first = registration(2).to_dict()
        first["log_dirs"] = [topic_id_from_str(DIR_A), topic_id_from_str(DIR_B)]
        ok = await broker_apis.broker_registration(
            node, Ctx(), decoded(ApiKey.BROKER_REGISTRATION, 4, first))
        assert ok["error_code"] == ErrorCode.NONE
        assert node.loader.image.registrations[2].log_dirs == [DIR_A, DIR_B]
        for dirs in ([DIR_B], [topic_id_to_str(uuid.uuid4())] * 2):
            other = registration(3).to_dict()
            other["log_dirs"] = [topic_id_from_str(d) for d in dirs]
            refused = await broker_apis.broker_registration(
                node, Ctx(), decoded(ApiKey.BROKER_REGISTRATION, 4, other))
            assert refused["error_code"] == ErrorCode.INVALID_REGISTRATION
        assert 3 not in node.loader.image.registrations

    run(main)


def test_the_broker_reports_where_its_replicas_live(tmp_path: Path) -> None:
    async def main() -> None:
        s = Setup()
        epoch = {1: await s.live_broker(1)}
        topic = await s.controller.create_topic("t", -1, -1, {0: [1], 1: [1], 2: [1]}, {})
        dirs = [tmp_path / "a", tmp_path / "b"]
        logs = LogManager(dirs)
        logs.load()
        for p in range(3):
            logs.create("t", p, topic.topic_id, LogConfig())
        requests: list[Any] = []

        async def send(api_key: ApiKey, version: int, body: dict[str, Any]) -> Any:
            request = decoded(api_key, version, body)
            requests.append(request)
            answer = await broker_apis.assign_replicas_to_dirs(
                SimpleNamespace(cluster=s.controller, authorizer=None), Ctx(), request)
            if answer["error_code"] != ErrorCode.NONE:
                raise KafkaError(ErrorCode(answer["error_code"]), "refused")
            return decoded_response(answer)

        ids = {dirs[0]: DIR_A, dirs[1]: DIR_B}
        assignments = DirectoryAssignments(1, s.image, logs, ids, send, lambda: epoch[1])
        assert len(assignments.pending()) == 3
        assignments.start()
        partitions = s.image.topics["t"].partitions
        done = await s.loader.wait_for(
            lambda: all(1 in partitions[p].directories for p in range(3)), 5)
        assert done, [partitions[p].directories for p in range(3)]
        for p in range(3):
            assert partitions[p].directories[1] == ids[logs.dir_of("t", p)]
        assert len(requests) == 1 and assignments.pending() == []
        await assignments.stop()
        logs.shutdown()

    run(main)


def decoded_response(answer: dict[str, Any]) -> Any:
    """A response body as the codec hands it to the sender (attributes, not keys)."""
    def ns(value: Any) -> Any:
        if isinstance(value, dict):
            return SimpleNamespace(**{k: ns(v) for k, v in value.items()})
        if isinstance(value, list):
            return [ns(v) for v in value]
        return value
    return ns(answer)


def test_directory_ids_come_from_meta_properties(tmp_path: Path) -> None:
    """Each log dir's directory.id; none at all when one dir has none (formatted before
    directory ids): then nothing is reported."""
    from strom.broker.kraft_mode import _log_dir_ids

    dirs = [tmp_path / "a", tmp_path / "b"]
    for d, dir_id in zip(dirs, (DIR_A, DIR_B), strict=True):
        d.mkdir()
        (d / "meta.properties").write_text(f"version=1\nnode.id=1\ndirectory.id={dir_id}\n")
    assert _log_dir_ids(LogManager(dirs)) == {dirs[0]: DIR_A, dirs[1]: DIR_B}
    (dirs[1] / "meta.properties").write_text("version=0\nbroker.id=1\n")
    assert _log_dir_ids(LogManager(dirs)) == {}


def test_a_replica_in_an_offline_log_dir_loses_its_leadership_and_isr_place() -> None:
    """KIP-858's failed disk: broker 1 reports the log dir of its replica offline in its
    heartbeat; the controller moves the leadership, takes it out of the ISR, Metadata shows it
    offline, and it may rejoin the ISR only once the dir is back. A broker whose every log dir
    is offline (one dir, full) counts as gone for all its replicas."""
    from strom.broker.handlers.metadata import partition_metadata

    async def main() -> None:
        s = Setup()
        epochs = {b: await s.live_broker(b) for b in (1, 2, 3)}
        registered = s.image.registrations
        for b, dirs in ((1, [DIR_A, DIR_B]), (2, [topic_id_to_str(uuid.uuid4())])):
            registered[b].log_dirs = dirs  # as they registered them
        topic = await s.controller.create_topic("t", -1, -1, {0: [1, 2, 3], 1: [2, 3, 1]}, {})
        await s.settle()
        await s.controller.assign_replicas_to_dirs(1, epochs[1], [(DIR_A, topic.topic_id, 0),
                                                                  (DIR_B, topic.topic_id, 1)])
        parts = s.image.topics["t"].partitions
        assert parts[0].leader == 1 and parts[0].isr == [1, 2, 3]

        async def beat(broker: int, offline: list[str]) -> None:
            await s.controller.heartbeat(broker, epochs[broker], s.loader.applied_offset,
                                         want_fence=False, want_shut_down=False,
                                         offline_dirs=offline)

        await beat(1, [DIR_A])
        await s.settle()
        assert parts[0].leader == 2 and 1 not in parts[0].isr
        assert parts[1].leader == 2 and 1 in parts[1].isr  # its replica is in the other dir
        assert partition_metadata(parts[0], s.image.brokers,
                                  s.image.offline_dirs_check()).offline_replicas == [1]
        with pytest.raises(KafkaError) as refused:
            await s.controller.alter_isr("t", 0, parts[0].leader_epoch, parts[0].partition_epoch,
                                         [2, 3, 1])
        assert refused.value.code == ErrorCode.INELIGIBLE_REPLICA

        await beat(1, [])  # back online: it may catch up and rejoin
        state = parts[0]
        await s.controller.alter_isr("t", 0, state.leader_epoch, state.partition_epoch,
                                     [2, 3, 1])
        assert s.image.topics["t"].partitions[0].isr == [2, 3, 1]

        await beat(2, registered[2].log_dirs)  # broker 2's only dir: everything of it is gone
        await s.settle()
        parts = s.image.topics["t"].partitions
        assert all(p.leader != 2 and 2 not in p.isr for p in parts.values())

    run(main)
