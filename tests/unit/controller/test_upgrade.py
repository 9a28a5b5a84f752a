"""Upgrading a single node's metadata in place: its newest old-format snapshot that passes its
checks becomes one Kafka snapshot at the same offset, once; nothing is ever deleted, and when no
old snapshot can be used the node refuses to start, naming them."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.broker.wiring import StartupError
from strom.cluster import metadata_snapshot as legacy
from strom.cluster import records as rec
from strom.cluster.features import feature_level_record
from strom.cluster.image import MetadataImage, PartitionState
from strom.cluster.quotas import PRODUCER_BYTE_RATE, entity
from strom.controller.upgrade import upgrade_single_node_metadata
from strom.raft.snapshot import (
    BOOTSTRAP_SNAPSHOT_ID,
    SnapshotId,
    load_snapshot,
    snapshot_ids,
    snapshot_name,
    write_snapshot,
)
from strom.security.acl import AclBinding, AclOperation, AclPermission, PatternType, ResourceType

CLUSTER = "c-upgrade"


def image_with(*topics: str) -> MetadataImage:
    image = MetadataImage(cluster_id=CLUSTER)
    for name in topics:
        tid = uuid.uuid4()
        rec.apply(image, rec.topic_record(name, tid))
        for p in range(2):
            rec.apply(image, rec.partition_record(tid, PartitionState(p, [0], [0], 0, 1, 2)))
        rec.apply(image, rec.config_record("topic", name, "retention.ms", "60000"))
    rec.apply(image, rec.config_record("broker", "", "log.retention.ms", "1000"))
    rec.apply(image, rec.config_record("user", "alice", "SCRAM-SHA-256", "salted"))
    rec.apply(image, rec.acl_record(AclBinding(
        ResourceType.TOPIC, "*", PatternType.LITERAL, "User:alice", "*", AclOperation.READ,
        AclPermission.ALLOW)))
    rec.apply(image, rec.client_quota_record(entity(user="alice"), PRODUCER_BYTE_RATE, 1e6))
    rec.apply(image, rec.producer_ids_record(7000))
    return image


def write_old(log_dir: Path, offset: int, image: MetadataImage) -> Path:
    """An old single node's snapshot, as its MetadataLog wrote it."""
    path = legacy.snapshot_path(log_dir, offset)
    legacy.write_snapshot(path, offset, image.to_snapshot())
    return path


def rebuilt(path: Path) -> MetadataImage:
    """The image a KRaft node's loader builds from a Kafka snapshot file."""
    image = MetadataImage(cluster_id=CLUSTER)
    for value in load_snapshot(path).values:
        rec.apply(image, json.loads(value))
    return image


def files(log_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log_dir.iterdir())}


# Both snapshot formats are fsynced as they are written: on a disk shared with other work that
# costs seconds a test, on tmpfs nothing.
_MEMORY_DIR = Path("/dev/shm")


@pytest.fixture
def log_dir(tmp_path: Path) -> Iterator[Path]:
    in_memory = _MEMORY_DIR.is_dir() and os.access(_MEMORY_DIR, os.W_OK)
    with tempfile.TemporaryDirectory(prefix="strom-upgrade-",
                                     dir=_MEMORY_DIR if in_memory else tmp_path) as root:
        d = Path(root) / "__cluster_metadata-0"
        d.mkdir()
        # the old node's log segment: the Raft log reads it as it is; the upgrade leaves it
        (d / "00000000000000000000.log").write_bytes(b"segment bytes")
        yield d


def test_the_newest_old_snapshot_becomes_one_kafka_snapshot(log_dir: Path) -> None:
    write_old(log_dir, 1200, image_with("a"))
    image = image_with("a", "b", "c")
    write_old(log_dir, 2400, image)
    before = files(log_dir)

    sid = upgrade_single_node_metadata(log_dir)

    assert sid == SnapshotId(2400, 0)
    written = log_dir / "00000000000000002400-0000000000.checkpoint"
    assert written.name == snapshot_name(sid)
    assert snapshot_ids(log_dir) == [sid]
    assert rebuilt(written).to_snapshot() == image.to_snapshot()
    after = files(log_dir)
    assert set(after) == set(before) | {written.name}
    assert all(after[name] == data for name, data in before.items())  # nothing changed


def test_a_second_start_converts_nothing(log_dir: Path) -> None:
    write_old(log_dir, 1500, image_with("a"))
    first = upgrade_single_node_metadata(log_dir)
    assert first == SnapshotId(1500, 0)
    converted = files(log_dir)
    # even a newer old snapshot (the old node's mode is not coming back) is left alone
    write_old(log_dir, 3000, image_with("a", "b"))
    assert upgrade_single_node_metadata(log_dir) is None
    assert snapshot_ids(log_dir) == [first]
    assert converted.items() <= files(log_dir).items()


def test_the_bootstrap_snapshot_does_not_count_as_converted(log_dir: Path) -> None:
    """A directory formatted for KRaft (storage format writes the 0-0 bootstrap snapshot)
    that also holds an old node's metadata is converted, the bootstrap snapshot kept."""
    write_snapshot(log_dir, BOOTSTRAP_SNAPSHOT_ID, [feature_level_record("metadata.version", 33)],
                   last_contained_log_timestamp=0)
    image = image_with("a")
    write_old(log_dir, 1001, image)
    sid = upgrade_single_node_metadata(log_dir)
    assert sid == SnapshotId(1001, 0)
    assert snapshot_ids(log_dir) == [BOOTSTRAP_SNAPSHOT_ID, sid]
    assert rebuilt(log_dir / snapshot_name(sid)).to_snapshot() == image.to_snapshot()


def test_a_damaged_newest_snapshot_falls_back_to_the_older(
        log_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    older = image_with("a")
    write_old(log_dir, 1000, older)
    newest = write_old(log_dir, 2000, image_with("a", "b"))
    newest.write_bytes(newest.read_bytes()[:-40])  # cut short
    before = files(log_dir)

    with caplog.at_level(logging.WARNING, logger="strom.controller.upgrade"):
        sid = upgrade_single_node_metadata(log_dir)

    assert sid == SnapshotId(1000, 0)
    assert snapshot_ids(log_dir) == [sid]
    assert rebuilt(log_dir / snapshot_name(sid)).to_snapshot() == older.to_snapshot()
    assert newest.name in caplog.text
    after = files(log_dir)
    assert before.items() <= after.items()  # the damaged one kept as it was, not set aside


def test_when_every_old_snapshot_is_damaged_the_start_is_refused(log_dir: Path) -> None:
    old = write_old(log_dir, 1000, image_with("a"))
    old.write_bytes(b"")
    newer = write_old(log_dir, 2000, image_with("a", "b"))
    data = bytearray(newer.read_bytes())
    data[len(data) // 2] ^= 0x01  # garbled: the CRC says so
    newer.write_bytes(bytes(data))
    before = files(log_dir)

    with pytest.raises(StartupError) as caught:
        upgrade_single_node_metadata(log_dir)

    message = str(caught.value)
    assert old.name in message and newer.name in message
    assert "\n" not in message and str(log_dir) in message
    assert snapshot_ids(log_dir) == []  # no Kafka snapshot guessed from nothing
    assert files(log_dir) == before


def test_nothing_to_convert(log_dir: Path) -> None:
    missing = log_dir.parent / "missing"
    assert upgrade_single_node_metadata(missing) is None
    assert not missing.exists()
    before = files(log_dir)
    assert upgrade_single_node_metadata(log_dir) is None  # a log without snapshots
    assert files(log_dir) == before
