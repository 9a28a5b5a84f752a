"""`strom lake maintain` on tables the lake writer wrote (pyiceberg SqlCatalog on a SQLite file
in tmp_path): compaction keeps the rows and the offsets, expiry keeps what writers resume from,
a commit that lands during a compaction is neither lost nor duplicated."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from strom.cli.main import app
from strom.config.broker import BrokerConfig
from strom.lake import maintain as lake
from strom.lake.mapping import OFFSETS_PROPERTY, RETRIES_PROPERTY, Batch, Row
from strom.lake.settings import Handoff, LakeSettings
from strom.lake.value_schema import iceberg_type
from strom.lake.writer import NoOffsets, TopicTable, offsets_snapshot, open_catalog

DAY_MS = 86_400_000
T0 = 1_700_000_000_000
NOW = lake.Options(expire_older_than_ms=0)  # expire all that may go


def _config(tmp_path: Path) -> dict[str, str]:
    return {"log.dirs": str(tmp_path), "iceberg.enable": "true"}


def _writer(tmp_path: Path, topic: str = "t") -> TopicTable:
    settings = LakeSettings.of(Handoff(_config(tmp_path), "127.0.0.1:9092"))
    table = TopicTable(open_catalog(settings), settings.namespace, topic)
    table.open()
    return table


def _append(writer: TopicTable, offsets: dict[int, int], partition: int, count: int,
            day: int = 0) -> dict[int, int]:
    """One commit of `count` records of a partition (day: days after T0), as the writer
    makes it; the offsets the table then covers."""
    batch = Batch()
    batch.clear(offsets)
    start = offsets.get(partition, 0)
    for offset in range(start, start + count):
        key = None if offset % 5 == 0 else b"k%d" % offset
        headers = (("h", b"%d" % offset), ("n", None)) if offset % 3 == 0 else ()
        batch.add(Row(partition, offset, T0 + day * DAY_MS + offset, key, b"v%d" % offset,
                      headers))
    return writer.commit(batch)


def _rows(table: Any) -> list[str]:
    """The table's rows as a sorted list (a multiset)."""
    table.refresh()
    return sorted(repr(sorted(r.items())) for r in table.scan().to_arrow().to_pylist())


def _summary(table: Any) -> dict[str, str]:
    table.refresh()
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    return dict(snapshot.summary.additional_properties)


def _maintain(tmp_path: Path, options: lake.Options, name: str = "t") -> lake.Report:
    catalog, namespace = lake.open_catalog(BrokerConfig.load(None, _config(tmp_path)))
    return lake.maintain(catalog, namespace, name, options)


def _parquet_files(tmp_path: Path) -> set[Path]:
    return set((tmp_path / "iceberg" / "warehouse").rglob("*.parquet"))


def _small_appends(writer: TopicTable, commits: int = 6) -> dict[int, int]:
    """Commits to two partitions, over two days: many small files."""
    offsets: dict[int, int] = {}
    for i in range(commits):
        offsets = _append(writer, offsets, i % 2, 4, day=i % 2)
    return offsets


def test_compaction_keeps_the_rows_and_offsets_and_expiry_deletes_what_it_replaced(
        tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    offsets = _small_appends(writer, 10)
    assert writer.table is not None
    before = _rows(writer.table)
    assert len(_parquet_files(tmp_path)) == 10

    report = _maintain(tmp_path, NOW)
    assert (report.data_files_before, report.data_files_after) == (10, 2)  # one per day
    assert (report.partitions_compacted, report.files_compacted, report.rows_rewritten) == \
        (2, 10, 40)
    assert _rows(writer.table) == before
    assert _summary(writer.table)[OFFSETS_PROPERTY] == '{"0":20,"1":20}'
    assert writer.offsets() == offsets
    # 10 appends + 2 compactions, all but the newest (which records the offsets) expired
    assert (report.snapshots_before, report.expired, report.snapshots_after) == (10, 11, 1)
    assert len(_parquet_files(tmp_path)) == 2  # the small files went with their snapshots
    assert report.files_deleted > 10

    # the writer resumes from the compaction's snapshot as from its own
    again = _writer(tmp_path)
    assert again.offsets() == offsets
    assert _append(again, offsets, 0, 2) == {0: 22, 1: 20}
    assert len(_rows(writer.table)) == 42


def test_typed_values_come_back_the_same(tmp_path: Path) -> None:
    """A value_schema table: nested values (records, lists, maps, decimals, dates) are
    rewritten as they were read."""
    schema = {"type": "record", "name": "V", "fields": [
        {"name": "id", "type": "long"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "int"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                    "precision": 9, "scale": 2}},
        {"name": "inner", "type": {"type": "record", "name": "I",
                                   "fields": [{"name": "x", "type": "double"}]}},
    ]}
    settings = LakeSettings.of(Handoff(_config(tmp_path), "127.0.0.1:9092"))
    writer = TopicTable(open_catalog(settings), settings.namespace, "typed",
                        iceberg_type(schema))
    writer.open()
    offsets: dict[int, int] = {}
    for commit in range(5):
        batch = Batch()
        batch.clear(offsets)
        for offset in range(commit * 2, commit * 2 + 2):
            value = {"id": offset, "tags": ["a", str(offset)], "attrs": {"k": offset},
                     "note": None if offset % 2 else "x", "day": dt.date(2024, 1, 1),
                     "amount": decimal.Decimal("12.34"), "inner": {"x": offset / 2}}
            batch.add(Row(0, offset, T0, b"k", b"raw")._replace(decoded=value))
        offsets = writer.commit(batch)
    assert writer.table is not None
    before = _rows(writer.table)
    report = _maintain(tmp_path, NOW, "typed")
    assert (report.partitions_compacted, report.data_files_after) == (1, 1)
    assert _rows(writer.table) == before
    assert writer.offsets() == offsets == {0: 10}


def test_nothing_to_do_below_the_thresholds_and_within_the_retention(tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    offsets: dict[int, int] = {}
    for _ in range(4):
        offsets = _append(writer, offsets, 0, 3)
    assert writer.table is not None
    location = writer.table.metadata_location
    report = _maintain(tmp_path, lake.Options())  # min 5 small files, 7 days of snapshots
    assert (report.partitions_compacted, report.expired, report.files_deleted) == (0, 0, 0)
    writer.table.refresh()
    assert writer.table.metadata_location == location
    # files at or above 3/4 of the target are not small
    report = _maintain(tmp_path, lake.Options(min_input_files=2, target_file_size=100))
    assert report.partitions_compacted == 0
    # retain-last keeps the newest snapshots however old
    report = _maintain(tmp_path, lake.Options(expire_older_than_ms=0, retain_last=3))
    assert (report.expired, report.snapshots_after) == (1, 3)


def test_a_dry_run_changes_nothing(tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    _small_appends(writer, 10)
    assert writer.table is not None
    location = writer.table.metadata_location
    files = _parquet_files(tmp_path)
    report = _maintain(tmp_path, lake.Options(expire_older_than_ms=0, dry_run=True))
    assert (report.partitions_compacted, report.data_files_after, report.expired) == (2, 2, 9)
    assert report.files_deleted > 0
    writer.table.refresh()
    assert writer.table.metadata_location == location
    assert _parquet_files(tmp_path) == files


def test_a_commit_during_the_compaction_is_neither_lost_nor_duplicated(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer commits after the compaction read the files and before it commits: the
    compaction's commit fails (it is not re-applied on top, which would record the offsets of
    the snapshot it read), its files are deleted, and it is planned again from a fresh read."""
    writer = _writer(tmp_path)
    offsets = _small_appends(writer, 6)
    assert writer.table is not None
    before = _rows(writer.table)
    real = lake._without_retries
    raced = []

    def commit_first(table: Any) -> Any:
        if not raced:  # the writer's commit lands between the read and the commit
            raced.append(_append(writer, offsets, 0, 3))
        return real(table)

    monkeypatch.setattr(lake, "_without_retries", commit_first)
    report = _maintain(tmp_path, lake.Options(min_input_files=3))
    assert raced == [{0: 15, 1: 12}]
    rows = _rows(writer.table)
    assert len(rows) == len(before) + 3 and set(before) <= set(rows)
    assert len(set(rows)) == len(rows)  # no row twice
    assert _summary(writer.table)[OFFSETS_PROPERTY] == '{"0":15,"1":12}'
    assert report.partitions_compacted == 2
    assert report.data_files_after == 2
    # no file of the refused attempt is left behind: 3 + 3 + 1 small files, 2 compacted ones
    assert len(_parquet_files(tmp_path)) == 9


def test_a_writer_that_read_before_a_compaction_commits_after_it(tmp_path: Path) -> None:
    """The writer checks the offsets, a compaction commits, the writer appends: its append
    fails against the new snapshot, it checks again (the compaction recorded the same offsets)
    and appends on top of it."""
    writer = _writer(tmp_path)
    offsets = _small_appends(writer, 6)
    assert writer.table is not None
    before = _rows(writer.table)
    real = writer.offsets
    compacted = []

    def compaction_after_the_check() -> dict[int, int]:
        found = real()
        if not compacted:
            compacted.append(_maintain(tmp_path, lake.Options(min_input_files=3)))
        return found

    writer.offsets = compaction_after_the_check  # type: ignore[method-assign]
    assert _append(writer, offsets, 1, 2, day=1) == {0: 12, 1: 14}
    assert compacted[0].partitions_compacted == 2
    rows = _rows(writer.table)
    assert len(rows) == len(set(rows)) == len(before) + 2 and set(before) <= set(rows)
    assert _summary(writer.table)[OFFSETS_PROPERTY] == '{"0":12,"1":14}'


def test_no_retries_even_when_the_table_allows_them(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A table without commit.retry.num-retries=0 (not created by the writer) and snapshot
    isolation: pyiceberg would re-apply the compaction on top of the writer's commit, with the
    offsets it read. It is made without retries all the same."""
    writer = _writer(tmp_path)
    offsets = _small_appends(writer, 6)
    assert writer.table is not None
    with writer.table.transaction() as tx:
        tx.remove_properties(RETRIES_PROPERTY)
        tx.set_properties({"write.delete.isolation-level": "snapshot"})
    real = lake.rewrite
    attempts = []

    def racing_rewrite(table: Any, partition: lake.PartitionPlan) -> int:
        attempts.append(partition.label)
        if len(attempts) == 1:
            real_without = lake._without_retries

            def commit_first(t: Any) -> Any:
                _append(writer, offsets, 1, 2, day=1)
                return real_without(t)

            monkeypatch.setattr(lake, "_without_retries", commit_first)
            try:
                return real(table, partition)
            finally:
                monkeypatch.setattr(lake, "_without_retries", real_without)
        return real(table, partition)

    monkeypatch.setattr(lake, "rewrite", racing_rewrite)
    report = _maintain(tmp_path, lake.Options(min_input_files=3))
    assert _summary(writer.table)[OFFSETS_PROPERTY] == '{"0":12,"1":14}'
    assert len(attempts) == 3  # the first partition twice
    assert len(_rows(writer.table)) == 26
    assert report.partitions_compacted == 2
    assert RETRIES_PROPERTY not in writer.table.properties  # nothing written to the table


def test_the_writer_walks_back_past_snapshots_without_offsets(tmp_path: Path) -> None:
    """A commit that records no offsets (Spark's rewrite_data_files, here an overwrite with the
    same rows): the writer resumes from the newest snapshot that does, and expiry keeps it
    whatever its age; once it is gone, the writer refuses the table."""
    writer = _writer(tmp_path)
    offsets = _small_appends(writer, 4)
    assert writer.table is not None
    writer.table.refresh()
    with_offsets = writer.table.current_snapshot()
    writer.table.overwrite(writer.table.scan().to_arrow())  # no strom.offsets
    assert OFFSETS_PROPERTY not in _summary(writer.table)
    assert writer.offsets() == offsets
    found = offsets_snapshot(writer.table)
    assert with_offsets is not None and found is not None
    assert found.snapshot_id == with_offsets.snapshot_id

    report = _maintain(tmp_path, NOW)
    writer.table.refresh()
    kept = {s.snapshot_id for s in writer.table.metadata.snapshots}
    assert with_offsets.snapshot_id in kept and report.snapshots_after == len(kept)
    assert _writer(tmp_path).offsets() == offsets  # the history still leads to it

    writer.table.maintenance.expire_snapshots().by_id(with_offsets.snapshot_id).commit()
    with pytest.raises(NoOffsets, match="has records but no snapshot"):
        writer.offsets()


def test_tables_with_delete_files_are_not_compacted(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    writer = _writer(tmp_path)
    _small_appends(writer, 6)

    def has_deletes(table: Any, options: lake.Options) -> Any:
        raise lake.HasDeleteFiles("x.parquet")

    monkeypatch.setattr(lake, "plan", has_deletes)
    report = _maintain(tmp_path, lake.Options(min_input_files=2))
    assert report.partitions_compacted == 0 and "delete files" in report.notes[0]


def test_missing_catalog_namespace_and_table(tmp_path: Path) -> None:
    with pytest.raises(lake.MaintainError, match="no Iceberg catalog at"):
        lake.open_catalog(BrokerConfig.load(None, _config(tmp_path)))
    _small_appends(_writer(tmp_path, "orders.eu"), 1)
    catalog, namespace = lake.open_catalog(BrokerConfig.load(None, _config(tmp_path)))
    assert lake.table_names(catalog, namespace) == ["orders.eu"]
    with pytest.raises(lake.MaintainError, match=r"no table strom\.x .*orders\.eu"):
        lake.table_names(catalog, namespace, ["x"])
    with pytest.raises(lake.MaintainError, match="no namespace 'other'"):
        lake.open_catalog(BrokerConfig.load(None, {**_config(tmp_path),
                                                   "iceberg.namespace": "other"}))


# -- the command ------------------------------------------------------------------------------

runner = CliRunner()


def test_the_command(tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    _small_appends(writer, 6)
    props = tmp_path / "server.properties"
    props.write_text(f"log.dirs={tmp_path}\niceberg.enable=true\n")
    res = runner.invoke(app, ["lake", "maintain", "-c", str(props), "--dry-run",
                              "--expire-older-than", "0s", "--min-input-files", "3"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["Table", "Snapshots", "Expired", "Files", "deleted", "Data",
                                "files", "Partitions", "compacted", "Rows", "rewritten", "Note"]
    # 2 compactions, 5 snapshots expired, 5 files deleted, 6 -> 2 data files, 24 rows
    assert lines[1].split() == ["strom.t", "6", "->", "3", "5", "5", "6", "->", "2", "2", "24"]
    assert "Dry run: nothing was changed" in lines[-1]
    res = runner.invoke(app, ["lake", "maintain", "-c", str(props), "--table", "t",
                              "--expire-older-than", "1d12h", "--target-file-size", "64MiB",
                              "--min-input-files", "3"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[1].split() == \
        ["strom.t", "6", "->", "8", "0", "0", "6", "->", "2", "2", "24"]


@pytest.mark.parametrize(("args", "code", "fragment"), [
    (["--override", "log.dirs={tmp}/none"], 1, "no Iceberg catalog at"),
    (["--override", "log.dirs={tmp}", "--table", "nope"], 1, "no table strom.nope"),
    (["--expire-older-than", "7 days"], 2, "invalid --expire-older-than '7 days'"),
    (["--target-file-size", "big"], 2, "invalid --target-file-size 'big'"),
    (["--retain-last", "0"], 2, "--retain-last must be at least 1"),
    (["--config", "{tmp}/missing.properties"], 2, "broker config file not found"),
])
def test_command_errors_are_one_line(tmp_path: Path, args: list[str], code: int,
                                     fragment: str) -> None:
    _small_appends(_writer(tmp_path), 1)
    res = runner.invoke(app, ["lake", "maintain",
                              *(a.replace("{tmp}", str(tmp_path)) for a in args)])
    assert res.exit_code == code, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and fragment in lines[0], lines
