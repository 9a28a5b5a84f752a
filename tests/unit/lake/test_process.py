"""The lake writer's commit loop, on a real SQLite catalog with a stand-in consumer: a batch is
committed with its offsets; a writer fenced by another reads again from the table's offsets; a
failed commit drops nothing — the records are read again once the table answers."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from strom.lake.mapping import Batch, Row
from strom.lake.process import LakeWriter, TopicConfig
from strom.lake.settings import Handoff, LakeSettings
from strom.lake.writer import TopicTable, open_catalog

TOPIC = "events"


class Assignments:
    """What a consumer's assign calls leave: partition -> the offset it reads from."""

    def __init__(self) -> None:
        self.reading: dict[int, int] = {}

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            self.reading[tp.partition] = tp.offset

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            del self.reading[tp.partition]

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, p, o) for p, o in self.reading.items()]


def _writer(tmp_path: Path, broker_id: int | None = 0) -> tuple[LakeWriter, Assignments]:
    settings = LakeSettings.of(Handoff({"log.dirs": str(tmp_path)}, "127.0.0.1:9092"))
    settings.broker_id = broker_id
    consumer = Assignments()
    return LakeWriter(settings, threading.Event(), open_catalog(settings), None, consumer), \
        consumer


def _read(writer: LakeWriter, partition: int, offsets: range) -> None:
    for offset in offsets:
        writer.topics[TOPIC].batch.add(Row(partition, offset, 1_700_000_000_000, None, b"v"))


def _rows(writer: LakeWriter) -> list[tuple[int, int]]:
    table = writer.topics[TOPIC].table.table
    table.refresh()
    return sorted((r["partition"], r["offset"]) for r in table.scan().to_arrow().to_pylist())


def test_commits_resume_and_fencing(tmp_path: Path) -> None:
    writer, consumer = _writer(tmp_path)
    writer.start(TOPIC, TopicConfig("key_value", 500, {0: 0, 1: 0, 2: 7}))  # 2: another's
    assert consumer.reading == {0: OFFSET_BEGINNING, 1: OFFSET_BEGINNING}
    _read(writer, 0, range(0, 3))
    writer.flush(TOPIC)
    assert _rows(writer) == [(0, 0), (0, 1), (0, 2)]

    other = TopicTable(writer.catalog, writer.settings.namespace, TOPIC)  # a second writer
    other.open()
    batch = Batch()
    batch.clear({0: 3})
    batch.add(Row(0, 3, 1_700_000_000_000, None, b"v"))
    other.commit(batch)
    _read(writer, 0, range(3, 5))  # the same record, read by this writer too
    writer.flush(TOPIC)  # fenced: reads again from the table's offsets
    assert consumer.reading == {0: 4, 1: OFFSET_BEGINNING}
    assert _rows(writer) == [(0, o) for o in range(4)]
    _read(writer, 0, range(4, 5))
    writer.flush(TOPIC)
    assert _rows(writer) == [(0, o) for o in range(5)]


def test_a_failed_commit_drops_nothing(tmp_path: Path, monkeypatch) -> None:
    writer, consumer = _writer(tmp_path)
    writer.start(TOPIC, TopicConfig("key_value", 500, {0: 0}))
    _read(writer, 0, range(0, 2))
    writer.flush(TOPIC)
    state = writer.topics[TOPIC]

    def unreachable(batch: Batch) -> dict[int, int]:
        raise OSError("the catalog is out of reach")

    monkeypatch.setattr(state.table, "commit", unreachable)
    _read(writer, 0, range(2, 6))
    writer.flush(TOPIC)
    assert state.failed and consumer.reading == {}  # not read while the table is out of reach
    monkeypatch.undo()
    writer.flush(TOPIC)  # the table answers: read again from what it holds
    assert not state.failed and consumer.reading == {0: 2}
    _read(writer, 0, range(2, 6))
    writer.flush(TOPIC)
    assert _rows(writer) == [(0, o) for o in range(6)]


def test_partitions_that_move_to_another_leader_are_left_to_it(tmp_path: Path) -> None:
    writer, consumer = _writer(tmp_path)
    writer.start(TOPIC, TopicConfig("key_value", 500, {0: 0, 1: 0}))
    _read(writer, 1, range(0, 2))

    def discover() -> dict[str, TopicConfig]:
        return {TOPIC: TopicConfig("key_value", 500, {0: 0, 1: 5})}

    writer.discover = discover  # type: ignore[method-assign]
    writer.refresh()  # what was read of partition 1 is committed first
    assert consumer.reading == {0: OFFSET_BEGINNING}
    assert _rows(writer) == [(1, 0), (1, 1)]


class Values:
    """A stand-in value schema: b"bad" does not decode, b"down" names a schema the registry
    cannot serve now; anything else decodes to itself. Its subject has one version."""

    latest_id = 1
    held: dict[int, str] = {}

    def latest_now(self) -> tuple[int, int]:
        return self.latest_id, 1

    def decode(self, value: bytes | None) -> bytes | None:
        from strom.lake.value_schema import RegistryUnavailable, Undecodable

        if value == b"bad":
            raise Undecodable("not Avro")
        if value == b"down":
            raise RegistryUnavailable("the registry is out of reach")
        return value


class Letters:
    """A stand-in dead-letter sender: records what it was given; refuses the offsets listed."""

    def __init__(self) -> None:
        self.sent: list[int] = []
        self.refuse: set[int] = set()

    def send(self, topic: str, dlq: str, bad: list[tuple[Row, str]]) -> dict[int, int]:
        failed = [row.offset for row, _ in bad if row.offset in self.refuse]
        self.sent += [row.offset for row, _ in bad if row.offset not in self.refuse]
        return {0: min(failed)} if failed else {}


def _read_values(writer: LakeWriter, values: dict[int, bytes]) -> None:
    for offset, value in values.items():
        writer.topics[TOPIC].batch.add(Row(0, offset, 1_700_000_000_000, None, value))


def test_undecodable_values_go_to_the_dead_letter_topic_and_nothing_else_is_skipped(
        tmp_path: Path) -> None:
    writer, consumer = _writer(tmp_path)
    writer.start(TOPIC, TopicConfig("key_value", 500, {0: 0}, dlq="dlq.events"))
    state = writer.topics[TOPIC]
    state.decoder = Values()
    letters = Letters()
    writer.dead_letters = letters  # type: ignore[assignment]
    _read_values(writer, {0: b"a", 1: b"bad", 2: b"b"})
    writer.flush(TOPIC)
    assert _rows(writer) == [(0, 0), (0, 2)] and letters.sent == [1]
    assert state.table.offsets() == {0: 3}
    # only dead letters: the table's offsets still move past them (an empty commit)
    _read_values(writer, {3: b"bad", 4: b"bad"})
    writer.flush(TOPIC)
    assert letters.sent == [1, 3, 4] and state.table.offsets() == {0: 5}
    # a schema the registry cannot serve now holds its record back (no dead letter), and a
    # refused dead letter does too: each is read again after the commit
    _read_values(writer, {5: b"c", 6: b"down", 7: b"bad"})
    writer.flush(TOPIC)
    assert letters.sent == [1, 3, 4] and state.table.offsets() == {0: 6}
    assert consumer.reading == {0: 6}
    letters.refuse = {7}
    _read_values(writer, {6: b"d", 7: b"bad", 8: b"e"})
    writer.flush(TOPIC)
    assert state.table.offsets() == {0: 7} and consumer.reading == {0: 7}
    letters.refuse = set()
    _read_values(writer, {7: b"bad", 8: b"e"})
    writer.flush(TOPIC)
    assert letters.sent == [1, 3, 4, 7] and state.table.offsets() == {0: 9}
    assert _rows(writer) == [(0, o) for o in (0, 2, 5, 6, 8)]


def test_lag_failures_and_back_off_are_reported(tmp_path: Path, monkeypatch, capsys) -> None:
    writer, consumer = _writer(tmp_path)
    high = {0: 10, 1: 4}
    consumer.get_watermark_offsets = lambda tp, timeout, cached: (0, high[tp.partition])  # type: ignore[attr-defined]
    writer.start(TOPIC, TopicConfig("key_value", 500, {0: 0, 1: 0}))
    state = writer.topics[TOPIC]
    _read(writer, 0, range(0, 6))
    writer.flush(TOPIC)
    writer.report()
    report = json.loads(capsys.readouterr().out)["lake"][TOPIC]
    assert report["lag_records"] == 4 + 4 and report["commit_failures"] == 0
    assert report["last_commit_s"] == pytest.approx(time.time(), abs=60)

    def unreachable(batch: Batch) -> dict[int, int]:
        raise OSError("the catalog is out of reach")

    monkeypatch.setattr(state.table, "commit", unreachable)
    monkeypatch.setattr(state.table, "offsets", lambda: unreachable(state.batch))
    _read(writer, 0, range(6, 8))
    writer.flush(TOPIC)
    high[0] = 30  # the topic grows while the table is out of reach
    backoffs = [state.backoff_s]
    for _ in range(4):
        writer.flush(TOPIC)
        backoffs.append(state.backoff_s)
    assert backoffs == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert state.due > time.monotonic() + 15
    writer.report()
    report = json.loads(capsys.readouterr().out)["lake"][TOPIC]
    assert report["lag_records"] == 24 + 4 and report["commit_failures"] == 5
