"""`strom lake maintain`: snapshot expiry and small-file compaction of the Iceberg topics' tables
(issue 33), with pyiceberg (imported here, and by the CLI only when the command runs).

The lake writer commits every `iceberg.commit.interval.ms`: one snapshot and at least one small
data file per commit, forever. For each table of the namespace (or the ones named) this

1. compacts: in each partition (day) of the current snapshot holding at least
   `min_input_files` data files smaller than 3/4 of `target_file_size` (Iceberg's
   rewrite_data_files' rule), reads those files and writes their rows again as one file per
   group of at most `target_file_size` bytes, in one commit per partition that removes the old
   files and adds the new ones (an overwrite snapshot, same rows). The commit records the
   `strom.offsets` the table covers, verbatim, so writers resume from the compaction's snapshot
   as from their own. It asserts that the table's current snapshot is still the one read and it
   is made without pyiceberg's retries: if a writer committed meanwhile, it fails (it is never
   re-applied on top of the writer's snapshot, which would record stale offsets) and the
   partition is planned again from a fresh read, a few times.
2. expires snapshots older than `expire_older_than_ms`, keeping the `retain_last` newest of the
   current history and, whatever their age, every snapshot from the current one back to the
   newest that records `strom.offsets` (a restart resumes from it; removing a snapshot also cuts
   its child's link to its parent, so the whole way there is kept). Then it deletes the files
   only the expired snapshots referenced: their manifest lists, manifests and data files (the
   small files a compaction replaced, once nothing older reads them). pyiceberg's expiry removes
   snapshots from the metadata only.

Tables with delete files (written by another engine) are not compacted: their rows are not
their data files' rows.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import FileScanTask, Table, TableProperties
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot, ancestors_of

from strom.config.broker import BrokerConfig
from strom.lake.mapping import OFFSETS_PROPERTY, RETRIES_PROPERTY
from strom.lake.settings import CatalogConfigError, catalog_properties
from strom.lake.writer import load_catalog, offsets_snapshot

log = logging.getLogger("strom.lake")

DAY_MS = 86_400_000
SMALL_RATIO = 0.75  # a file below this share of the target is small (rewrite_data_files')
NO_SPLIT = str(1 << 62)  # write.target-file-size-bytes for a group's rewrite: one file


class MaintainError(Exception):
    """A user error (no catalog, no such table): one line."""


@dataclass(frozen=True)
class Options:
    expire_older_than_ms: int = 7 * DAY_MS  # Iceberg's history.expire.max-snapshot-age-ms
    retain_last: int = 1  # Iceberg's history.expire.min-snapshots-to-keep
    target_file_size: int = 512 << 20  # rewrite_data_files' target-file-size-bytes
    min_input_files: int = 5  # rewrite_data_files' min-input-files
    dry_run: bool = False
    attempts: int = 3  # commits tried per partition (and for the expiry) while writers commit

    @property
    def small_file_size(self) -> int:
        return int(self.target_file_size * SMALL_RATIO)


@dataclass
class Report:
    """What maintenance did to one table (or would do, in a dry run)."""

    table: str
    snapshots_before: int = 0
    snapshots_after: int = 0
    expired: int = 0
    files_deleted: int = 0  # manifest lists, manifests and data files only expired ones read
    data_files_before: int = 0
    data_files_after: int = 0
    partitions_compacted: int = 0
    files_compacted: int = 0  # small files rewritten
    rows_rewritten: int = 0
    notes: list[str] = field(default_factory=list)
    failed: bool = False


Step = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


# -- the catalog and its tables -------------------------------------------------------------

def open_catalog(config: BrokerConfig) -> tuple[Catalog, str]:
    """The catalog the broker's lake writer writes (as its config says) and the namespace of
    the topics' tables. Creates nothing: a missing catalog or namespace is a MaintainError."""
    from pyiceberg.exceptions import RESTError
    from requests.exceptions import RequestException
    from sqlalchemy.exc import SQLAlchemyError

    try:
        props = catalog_properties(config)
    except CatalogConfigError as exc:
        raise MaintainError(str(exc)) from None
    uri = props.get("uri", "")
    namespace = config.get("iceberg.namespace")
    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///"):])
        if not path.is_file():
            where = "iceberg.catalog.uri" if config.get("iceberg.catalog.uri") else \
                "iceberg.catalog.uri's default, under the first log dir"
            raise MaintainError(f"no Iceberg catalog at {path} ({where}): is this the "
                                "config of a broker with iceberg.enable=true?")
    try:
        catalog = load_catalog(config.get("iceberg.catalog.name"), props)
        present = catalog.namespace_exists(namespace)
    except (SQLAlchemyError, RESTError, RequestException, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MaintainError(f"cannot open the Iceberg catalog {uri}: {first}") from None
    if not present:
        raise MaintainError(f"the Iceberg catalog {uri} has no namespace {namespace!r} "
                            "(iceberg.namespace) in catalog "
                            f"{config.get('iceberg.catalog.name')!r} (iceberg.catalog.name)")
    return catalog, namespace


def table_names(catalog: Catalog, namespace: str, names: Sequence[str] = ()) -> list[str]:
    """The tables to maintain: the ones named (each must exist), or all of the namespace."""
    present = sorted(identifier[-1] for identifier in catalog.list_tables(namespace))
    if not names:
        return present
    for name in names:
        if name not in present:
            raise MaintainError(f"no table {namespace}.{name} in the Iceberg catalog"
                                + (f" (its tables: {', '.join(present)})" if present else
                                   " (the namespace has no tables)"))
    return list(dict.fromkeys(names))


def maintain(catalog: Catalog, namespace: str, name: str, options: Options,
             now_ms: int | None = None, step: Step = _quiet) -> Report:
    """Compacts then expires one table (see the module's docstring)."""
    table = catalog.load_table((namespace, name))
    report = Report(f"{namespace}.{name}", snapshots_before=len(table.metadata.snapshots))
    report.data_files_before = report.data_files_after = _count_data_files(table)
    step(f"{report.table}: compacting")
    compact(table, options, report, step)
    step(f"{report.table}: expiring snapshots")
    expire(table, options, report, int(time.time() * 1000) if now_ms is None else now_ms)
    if options.dry_run:  # one snapshot per partition compacted, then the expiry
        report.snapshots_after = \
            report.snapshots_before + report.partitions_compacted - report.expired
    else:
        table.refresh()
        report.snapshots_after = len(table.metadata.snapshots)
        report.data_files_after = _count_data_files(table)
    return report


# -- compaction ------------------------------------------------------------------------------

@dataclass
class PartitionPlan:
    key: tuple[int, tuple[Any, ...]]  # spec id, partition values
    label: str  # as in a data file's path: timestamp_day=2024-05-01
    groups: list[list[DataFile]]  # each rewritten as one file

    @property
    def files(self) -> list[DataFile]:
        return [f for group in self.groups for f in group]


class HasDeleteFiles(Exception):
    pass


def _live_entries(table: Table) -> list[Any]:
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    return [entry for manifest in snapshot.manifests(table.io)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)]


def _count_data_files(table: Table) -> int:
    return sum(1 for e in _live_entries(table) if e.data_file.content == DataFileContent.DATA)


def plan(table: Table, options: Options) -> dict[tuple[int, tuple[Any, ...]], PartitionPlan]:
    """The partitions of the current snapshot worth compacting, and how."""
    spec = table.spec()
    files: dict[tuple[int, tuple[Any, ...]], list[tuple[int, str, DataFile]]] = {}
    for entry in _live_entries(table):
        data_file = entry.data_file
        if data_file.content != DataFileContent.DATA:
            raise HasDeleteFiles(data_file.file_path)
        if data_file.spec_id != spec.spec_id or \
                data_file.file_size_in_bytes >= options.small_file_size:
            continue
        key = (data_file.spec_id,
               tuple(data_file.partition[i] for i in range(len(data_file.partition))))
        files.setdefault(key, []).append(
            (entry.sequence_number or 0, data_file.file_path, data_file))
    plans = {}
    for key, found in files.items():
        if len(found) < options.min_input_files:
            continue
        groups: list[list[DataFile]] = [[]]
        size = 0
        for _, _, data_file in sorted(found, key=lambda t: (t[0], t[1])):  # commit order
            if groups[-1] and size + data_file.file_size_in_bytes > options.target_file_size:
                groups.append([])
                size = 0
            groups[-1].append(data_file)
            size += data_file.file_size_in_bytes
        groups = [g for g in groups if len(g) > 1]
        if groups:
            label = spec.partition_to_path(groups[0][0].partition, table.schema()) \
                if spec.fields else "(unpartitioned)"
            plans[key] = PartitionPlan(key, label, groups)
    return plans


def compact(table: Table, options: Options, report: Report, step: Step = _quiet) -> None:
    try:
        todo = plan(table, options)
    except HasDeleteFiles:
        report.notes.append("has delete files: not compacted (Spark's rewrite_data_files "
                            "applies them)")
        return
    for key in sorted(todo, key=lambda k: todo[k].label):
        label = todo[key].label
        for attempt in range(options.attempts):
            if attempt:
                table.refresh()
            try:
                current = todo[key] if attempt == 0 else plan(table, options).get(key)
            except HasDeleteFiles:
                report.notes.append("has delete files now: compaction stopped")
                return
            if current is None:  # compacted by someone else meanwhile
                break
            step(f"{report.table}: compacting {label} ({len(current.files)} files)")
            if options.dry_run:
                rows = sum(f.record_count for f in current.files)
            else:
                try:
                    rows = rewrite(table, current)
                except (CommitFailedException, ValidationException) as exc:
                    log.info("%s: compacting %s lost a race with a commit (%s): planning it "
                             "again", report.table, label, exc)
                    continue
            report.partitions_compacted += 1
            report.files_compacted += len(current.files)
            report.rows_rewritten += rows
            report.data_files_after -= len(current.files) - len(current.groups)
            break
        else:
            report.notes.append(f"{label}: the table kept moving, not compacted "
                                f"({options.attempts} attempts)")


def _without_retries(table: Table) -> Table:
    """The table, for commits pyiceberg does not retry whatever the table's
    commit.retry.num-retries (the writer sets it to 0; a table it did not create may not have
    it). Only this process's copy of the metadata says so: nothing is written to the table."""
    if table.properties.get(RETRIES_PROPERTY) == "0":
        return table
    metadata = table.metadata.model_copy(
        update={"properties": {**table.properties, RETRIES_PROPERTY: "0"}})
    return Table(table.name(), metadata, table.metadata_location, table.io, table.catalog,
                 table.config)


def _one_file_per_group(metadata: TableMetadata) -> TableMetadata:
    return metadata.model_copy(update={"properties": {
        **metadata.properties, TableProperties.WRITE_TARGET_FILE_SIZE_BYTES: NO_SPLIT}})


def _in_order(rows: Any) -> Any:
    names = rows.schema.names
    if "partition" in names and "offset" in names:
        return rows.sort_by([("partition", "ascending"), ("offset", "ascending")])
    return rows


def rewrite(table: Table, partition: PartitionPlan) -> int:
    """Rewrites the partition's groups of files as one file each and commits that, with the
    offsets the table covers, on top of the current snapshot only: a CommitFailedException if
    it moved (its new files are then deleted). The rows rewritten."""
    found = offsets_snapshot(table)
    properties = {}
    if found is not None and found.summary is not None:
        properties[OFFSETS_PROPERTY] = str(found.summary[OFFSETS_PROPERTY])
    schema = table.schema()
    write_metadata = _one_file_per_group(table.metadata)
    write_uuid, counter = uuid.uuid4(), itertools.count(0)
    written: list[DataFile] = []
    try:
        for group in partition.groups:
            rows = ArrowScan(table.metadata, table.io, schema, AlwaysTrue()).to_table(
                [FileScanTask(f) for f in group])
            expected = sum(f.record_count for f in group)
            new = list(_dataframe_to_data_files(write_metadata, _in_order(rows), table.io,
                                                write_uuid=write_uuid, counter=counter))
            written.extend(new)
            if rows.num_rows != expected or sum(f.record_count for f in new) != expected:
                raise RuntimeError(
                    f"rewriting {len(group)} files of {partition.label} gave "
                    f"{sum(f.record_count for f in new)} rows, not {expected}: not committed")
        transaction = _without_retries(table).transaction()
        with transaction.update_snapshot(snapshot_properties=properties).overwrite() as files:
            for data_file in partition.files:
                files.delete_data_file(data_file)
            for data_file in written:
                files.append_data_file(data_file)
    except BaseException:  # nothing committed: the table does not know the new files
        _delete(table, [f.file_path for f in written])
        raise
    try:
        transaction.commit_transaction()
    except (CommitFailedException, ValidationException):  # refused: never committed
        _delete(table, [f.file_path for f in written])
        raise
    table.refresh()
    return sum(f.record_count for f in written)


def _delete(table: Table, paths: Sequence[str]) -> int:
    deleted = 0
    for path in paths:
        try:
            table.io.delete(path)
            deleted += 1
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("cannot delete %s: %s", path, exc)
    return deleted


# -- expiry ----------------------------------------------------------------------------------

def _records_offsets(snapshot: Snapshot) -> bool:
    return snapshot.summary is not None and bool(snapshot.summary.get(OFFSETS_PROPERTY))


def to_expire(metadata: TableMetadata, options: Options, now_ms: int) -> list[int]:
    """The ids of the snapshots older than the retention that nothing keeps."""
    history = list(ancestors_of(metadata.current_snapshot(), metadata))
    newest = next((i for i, s in enumerate(history) if _records_offsets(s)), None)
    kept = history[:max(options.retain_last, 0 if newest is None else newest + 1)]
    keep = {s.snapshot_id for s in kept} | {ref.snapshot_id for ref in metadata.refs.values()}
    cutoff = now_ms - options.expire_older_than_ms
    return sorted(s.snapshot_id for s in metadata.snapshots
                  if s.timestamp_ms < cutoff and s.snapshot_id not in keep)


def unreferenced(table: Table, gone: Sequence[Snapshot], kept: Sequence[Snapshot]) -> list[str]:
    """The files (manifest lists, manifests, data and delete files) the `gone` snapshots
    referenced and none of the `kept` ones does."""
    io = table.io
    keep: set[str] = set()
    for snapshot in kept:
        keep.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            if manifest.manifest_path not in keep:
                keep.add(manifest.manifest_path)
                keep.update(e.data_file.file_path
                            for e in manifest.fetch_manifest_entry(io, discard_deleted=True))
    candidates: set[str] = set()
    for snapshot in gone:
        candidates.add(snapshot.manifest_list)
        try:
            manifests = snapshot.manifests(io)
        except FileNotFoundError:  # deleted by an earlier run that stopped half way
            continue
        for manifest in manifests:
            if manifest.manifest_path in keep or manifest.manifest_path in candidates:
                continue
            candidates.add(manifest.manifest_path)
            try:  # deleted entries too: the files a compaction in an expired snapshot removed
                entries = manifest.fetch_manifest_entry(io, discard_deleted=False)
            except FileNotFoundError:
                continue
            candidates.update(e.data_file.file_path for e in entries)
    return sorted(candidates - keep)


def expire(table: Table, options: Options, report: Report, now_ms: int) -> None:
    for _ in range(options.attempts):
        table.refresh()
        metadata = table.metadata
        doomed = to_expire(metadata, options, now_ms)
        if not doomed:
            return
        gone = [s for s in metadata.snapshots if s.snapshot_id in set(doomed)]
        if options.dry_run:
            kept = [s for s in metadata.snapshots if s.snapshot_id not in set(doomed)]
            report.expired = len(doomed)
            report.files_deleted = len(unreferenced(table, gone, kept))
            return
        try:
            table.maintenance.expire_snapshots().by_ids(doomed).commit()
        except CommitFailedException as exc:  # another process committed meanwhile
            log.info("%s: expiring snapshots lost a race with a commit (%s): again",
                     report.table, exc)
            continue
        table.refresh()  # what is kept: the table as the expiry left it (and commits since)
        report.expired += len(doomed)
        report.files_deleted += _delete(table, unreferenced(table, gone, table.metadata.snapshots))
        return
    report.notes.append(f"the table kept moving: no snapshot expired ({options.attempts} "
                        "attempts)")
