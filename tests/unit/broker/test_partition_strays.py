"""PartitionManager and data the metadata does not know: a complete image renames such logs to
Kafka's ``-stray`` names (never deletes them); an unverified image (a fallback snapshot, an
unreadable ZooKeeper node) judges nothing stray and only sets them aside. Deleting a topic
renames its directories at once and removes them in one worker-thread job."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import uuid
from pathlib import Path

from strom.broker import partitions as pm_module
from strom.broker.partitions import PartitionManager
from strom.cluster import records as rec
from strom.cluster.image import MetadataImage, PartitionState
from strom.config.broker import BrokerConfig
from strom.record import Record, build_batch
from strom.storage.config import LogConfig
from strom.storage.manager import LogManager

DEADLINE_S = 20.0
STRAY = r"{}\.[0-9a-f]{{32}}-stray"


def batch() -> bytearray:
    return bytearray(build_batch([Record(0, 1000, b"k", b"value")]))


class Disk:
    """Log dirs written by an earlier run: topics with records, then a start with an image."""

    def __init__(self, root: Path) -> None:
        self.data = root / "data"
        self.ids: dict[str, uuid.UUID] = {}
        self.reborn_id = uuid.uuid4()  # the id the image gives `reborn`
        logs = LogManager([self.data])
        logs.load()
        for name in ("known", "unknown", "reborn"):
            self.ids[name] = uuid.uuid4()
            for p in range(2):
                plog = logs.create(name, p, self.ids[name], LogConfig())
                plog.append(batch(), leader_epoch=0, now_ms=0)
        logs.shutdown()
        self.segments = {p.parent.name: p.read_bytes()
                         for p in self.data.glob("*/00000000000000000000.log")}

    def start(self, *, unverified: str | None = None) -> tuple[LogManager, PartitionManager]:
        """The image knows `known` (same id) and `reborn` (a new id), not `unknown`."""
        logs = LogManager([self.data])
        logs.load()
        image = MetadataImage(cluster_id="c")
        for name, topic_id in (("known", self.ids["known"]), ("reborn", self.reborn_id)):
            rec.apply(image, rec.topic_record(name, topic_id))
            for p in range(2):
                rec.apply(image, rec.partition_record(topic_id, PartitionState(p, [0], [0], 0)))
        manager = PartitionManager(0, BrokerConfig({"log.dirs": str(self.data)}), image, logs)
        manager.sync_all(unverified=unverified)
        return logs, manager

    def names(self) -> list[str]:
        return sorted(p.name for p in self.data.iterdir() if p.is_dir())

    def records_kept(self) -> bool:
        """Every segment written, byte for byte, somewhere under the log dir."""
        now = {p.read_bytes() for p in self.data.glob("*/00000000000000000000.log")}
        return set(self.segments.values()) <= now


def test_a_complete_image_renames_what_it_does_not_know_to_stray(tmp_path: Path,
                                                                   caplog) -> None:
    disk = Disk(tmp_path)
    caplog.set_level(logging.WARNING)
    logs, manager = disk.start()
    names = disk.names()
    for p in range(2):
        assert f"known-{p}" in names and manager.get("known", p) is not None
        assert manager.get("reborn", p) is not None  # a new, empty log of the new id
        assert manager.get("reborn", p).log_end_offset == 0
        assert sum(bool(re.fullmatch(STRAY.format(f"{t}-{p}"), n)) for n in names
                   for t in ("unknown", "reborn")) == 2
    assert disk.records_kept()
    assert all(logs.get("unknown", p) is None for p in range(2))
    assert "stray log unknown-0" in caplog.text and "stray log reborn-1" in caplog.text
    logs.shutdown()
    # a later start leaves the stray directories alone
    again, _ = disk.start()
    assert disk.names() == names and len(again.stray_dirs) == 4
    again.shutdown()


def test_an_unverified_image_judges_nothing_stray(tmp_path: Path, caplog) -> None:
    disk = Disk(tmp_path)
    before = disk.names()
    caplog.set_level(logging.WARNING, logger=pm_module.__name__)
    logs, manager = disk.start(unverified="the metadata came from a fallback snapshot")
    assert disk.names() == before  # nothing renamed, nothing removed
    assert disk.records_kept()
    assert manager.get("known", 0) is not None
    for p in range(2):
        assert logs.get("unknown", p) is None  # not served, retained or cleaned meanwhile
        assert manager.get("reborn", p) is None  # its name holds another id's data: not replaced
    assert "stray detection skipped: the metadata came from a fallback snapshot" in caplog.text
    logs.shutdown()
    logs, _ = disk.start()  # with a complete image later, they become stray
    assert sum(n.endswith("-stray") for n in disk.names()) == 4 and disk.records_kept()
    logs.shutdown()


def test_deleting_a_topic_renames_at_once_and_removes_in_one_background_job(
        tmp_path: Path, monkeypatch) -> None:
    logs = LogManager([tmp_path / "data"])
    logs.load()
    image = MetadataImage(cluster_id="c")
    manager = PartitionManager(0, BrokerConfig({"log.dirs": str(tmp_path / "data")}), image, logs)

    def apply(records: list[dict]) -> None:
        manager.on_changes([c for c in (rec.apply(image, r) for r in records) if c is not None])

    def create(name: str, count: int) -> uuid.UUID:
        topic_id = uuid.uuid4()
        apply([rec.topic_record(name, topic_id)] + [
            rec.partition_record(topic_id, PartitionState(p, [0], [0], 0)) for p in range(count)])
        return topic_id

    jobs: list[tuple[bool, int]] = []
    remove = LogManager._remove_dirs
    loop_thread = threading.current_thread()

    def recording(doomed: list[Path]) -> None:
        jobs.append((threading.current_thread() is loop_thread, len(doomed)))
        remove(doomed)

    monkeypatch.setattr(LogManager, "_remove_dirs", staticmethod(recording))

    async def scenario() -> None:
        old = create("t", 5)
        for p in range(5):
            manager.get("t", p).append(batch(), leader_epoch=0, now_ms=0)
        apply([rec.remove_topic_record(old)])
        create("t", 5)  # at once, under the same name
        for p in range(5):
            assert manager.get("t", p).log_end_offset == 0
        await asyncio.wait_for(logs.removals_done(), DEADLINE_S)

    asyncio.run(scenario())
    assert jobs == [(False, 5)]  # one worker-thread job for the whole topic
    names = sorted(p.name for p in (tmp_path / "data").iterdir() if p.is_dir())
    assert names == [f"t-{p}" for p in range(5)]


def test_a_deleted_topic_leaves_a_log_of_another_id_alone(tmp_path: Path, caplog) -> None:
    logs = LogManager([tmp_path / "data"])
    logs.load()
    image = MetadataImage(cluster_id="c")
    manager = PartitionManager(0, BrokerConfig({"log.dirs": str(tmp_path / "data")}), image, logs)
    other = logs.create("t", 0, uuid.uuid4(), LogConfig())  # not this image's topic
    other.append(batch(), leader_epoch=0, now_ms=0)
    topic_id = uuid.uuid4()
    rec.apply(image, rec.topic_record("t", topic_id))
    rec.apply(image, rec.partition_record(topic_id, PartitionState(0, [0], [0], 0)))
    caplog.set_level(logging.WARNING, logger=pm_module.__name__)
    manager.on_changes([rec.apply(image, rec.remove_topic_record(topic_id))])
    assert logs.get("t", 0) is other and (tmp_path / "data" / "t-0").exists()
    assert "kept" in caplog.text


def test_an_unknown_log_that_never_held_a_record_is_kept_too(tmp_path: Path) -> None:
    """Missing metadata is never a reason to remove a directory, even an empty one."""
    data = tmp_path / "data"
    logs = LogManager([data])
    logs.load()
    logs.create("empty", 0, uuid.uuid4(), LogConfig())  # e.g. made ahead for a creation that
    logs.shutdown()  # did not happen
    logs = LogManager([data])
    logs.load()
    manager = PartitionManager(0, BrokerConfig({"log.dirs": str(data)}),
                               MetadataImage(cluster_id="c"), logs)
    manager.sync_all()
    names = [p.name for p in data.iterdir() if p.is_dir()]
    assert len(names) == 1 and names[0].startswith("empty-0.") and names[0].endswith("-stray")
