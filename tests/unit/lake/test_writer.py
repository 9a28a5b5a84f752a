"""A topic's Iceberg table (pyiceberg SqlCatalog on a SQLite file): appends record the offsets
they cover, and a writer whose batch does not start where the table ends is fenced."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.config.broker import BrokerConfig
from strom.lake.mapping import OFFSETS_PROPERTY, RETRIES_PROPERTY, Batch, Row
from strom.lake.settings import Handoff, LakeSettings
from strom.lake.writer import Fenced, TopicTable, open_catalog


def _settings(tmp_path: Path) -> LakeSettings:
    config = {"log.dirs": str(tmp_path), "iceberg.enable": "true"}
    BrokerConfig.load(None, config)
    return LakeSettings.of(Handoff(config, "127.0.0.1:9092"))


def _batch(base: dict[int, int], partition: int, offsets: range) -> Batch:
    batch = Batch()
    batch.clear(base)
    for offset in offsets:
        batch.add(Row(partition, offset, 1_700_000_000_000, b"k%d" % offset, b"v%d" % offset))
    return batch


def test_appends_record_their_offsets_and_a_stale_writer_is_fenced(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    first = TopicTable(open_catalog(settings), settings.namespace, "orders.eu")
    assert first.open() == {}
    assert first.table is not None
    assert first.table.properties[RETRIES_PROPERTY] == "0"
    assert str(first.table.spec().fields[0].transform) == "day"
    assert first.commit(_batch({}, 0, range(0, 5))) == {0: 5}
    second = TopicTable(open_catalog(settings), settings.namespace, "orders.eu")
    assert second.open() == {0: 5}  # a restarted writer resumes from the table
    assert second.commit(_batch({0: 5}, 1, range(0, 3))) == {0: 5, 1: 3}
    # the first writer's next batch of partition 0 starts from 5: not fenced by partition 1
    assert first.commit(_batch({0: 5}, 0, range(5, 8))) == {0: 8, 1: 3}
    with pytest.raises(Fenced) as fenced:  # a zombie's batch from offset 5 again
        second.commit(_batch({0: 5}, 0, range(5, 7)))
    assert fenced.value.offsets == {0: 8, 1: 3}
    assert first.table is not None
    rows = first.table.scan().to_arrow().to_pylist()
    assert sorted((r["partition"], r["offset"]) for r in rows) == \
        [(0, o) for o in range(8)] + [(1, o) for o in range(3)]
    snapshot = first.table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert snapshot.summary[OFFSETS_PROPERTY] == '{"0":8,"1":3}'


def test_a_conflicting_commit_is_not_retried_onto_the_new_snapshot(tmp_path: Path) -> None:
    """Two writers pass the offsets check at once: the catalog's compare-and-swap refuses the
    second commit, and with retries off pyiceberg does not re-apply it on top of the first."""
    settings = _settings(tmp_path)
    first = TopicTable(open_catalog(settings), settings.namespace, "t")
    second = TopicTable(open_catalog(settings), settings.namespace, "t")
    first.open()
    second.open()
    assert second.commit(_batch({}, 0, range(0, 4))) == {0: 4}
    real = first.offsets
    calls = []

    def stale_once() -> dict[int, int]:  # its first check saw the table before the commit
        calls.append(1)
        return {} if len(calls) == 1 else real()

    first.offsets = stale_once  # type: ignore[method-assign]
    with pytest.raises(Fenced) as fenced:  # the second check, after the conflict, fences it
        first.commit(_batch({}, 0, range(0, 4)))
    assert fenced.value.offsets == {0: 4} and len(calls) == 2
    assert second.table is not None
    second.table.refresh()
    assert len(second.table.scan().to_arrow()) == 4


def test_a_conflict_with_a_writer_of_other_partitions_is_committed_again(
        tmp_path: Path) -> None:
    """Each broker of a cluster writes the partitions it leads: a commit that loses the race to
    another partition's is checked again and made on top of it."""
    settings = _settings(tmp_path)
    first = TopicTable(open_catalog(settings), settings.namespace, "t")
    second = TopicTable(open_catalog(settings), settings.namespace, "t")
    first.open()
    second.open()
    assert second.commit(_batch({}, 1, range(0, 2))) == {1: 2}
    real = first.offsets
    calls = []

    def stale_once() -> dict[int, int]:
        calls.append(1)
        return {} if len(calls) == 1 else real()

    first.offsets = stale_once  # type: ignore[method-assign]
    assert first.commit(_batch({}, 0, range(0, 3))) == {0: 3, 1: 2}
    assert first.table is not None
    assert sorted((r["partition"], r["offset"]) for r in first.table.scan().to_arrow().to_pylist()) \
        == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
