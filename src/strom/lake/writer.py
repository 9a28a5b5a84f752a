"""A topic's Iceberg table, written with pyiceberg (imported only in the lake writer's process).

`TopicTable.commit` appends a batch only if the table still covers exactly the offsets the batch
starts from, and commits without pyiceberg's retries (`commit.retry.num-retries=0`): pyiceberg
would otherwise re-apply an append on top of a concurrent one, and a second writer of the table
(a zombie writer, a restarted one) would duplicate rows. A conflict raises `Fenced` with the
table's offsets, from which the caller reads again."""

from __future__ import annotations

import contextlib
import ctypes
import logging
from collections.abc import Mapping

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from pyiceberg.transforms import DayTransform
from pyiceberg.types import (
    BinaryType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)
from sqlalchemy.exc import OperationalError

from strom.lake.mapping import (
    OFFSETS_PROPERTY,
    RETRIES_PROPERTY,
    TOPIC_PROPERTY,
    Batch,
    arrow_table,
    format_offsets,
    parse_offsets,
    row_dicts,
)
from strom.lake.settings import LakeSettings, local_catalog_paths

log = logging.getLogger("strom.lake")

KEY_VALUE_SCHEMA = Schema(
    NestedField(1, "partition", IntegerType(), required=True),
    NestedField(2, "offset", LongType(), required=True),
    NestedField(3, "timestamp", TimestamptzType(), required=True),
    NestedField(4, "key", BinaryType(), required=False),
    NestedField(5, "value", BinaryType(), required=False),
    NestedField(6, "headers", ListType(
        element_id=7, element_required=True, element_type=StructType(
            NestedField(8, "name", StringType(), required=True),
            NestedField(9, "value", BinaryType(), required=False))), required=False),
)
COMMIT_ATTEMPTS = 3
BY_DAY = PartitionSpec(PartitionField(source_id=3, field_id=1000, transform=DayTransform(),
                                      name="timestamp_day"))


def lean_memory() -> None:
    """Arrow's C++ allocations from jemalloc, freed pages back to the system at once: see
    strom.lake.process.main, which picks jemalloc before pyarrow allocates (pyarrow's
    default, mimalloc, kept 50-60 MB that commits had used). A pyarrow without jemalloc keeps
    its default."""
    with contextlib.suppress(NotImplementedError):
        pa.jemalloc_set_decay_ms(0)


def release_memory() -> None:
    """After a commit: glibc gives back the free pages of its heaps (the batch's Python bytes,
    librdkafka's buffers), where it would keep them for the process."""
    with contextlib.suppress(OSError, AttributeError):  # (AttributeError: not glibc)
        ctypes.CDLL(None).malloc_trim(0)


def table_schema(value_type: IcebergType | None) -> Schema:
    """key_value's columns, or with a `value` column of the value schema's type."""
    if value_type is None:
        return KEY_VALUE_SCHEMA
    return Schema(*(NestedField(5, "value", value_type, required=False) if f.field_id == 5
                    else f for f in KEY_VALUE_SCHEMA.fields))


class Fenced(Exception):
    """The table moved on without this writer: its offsets are not the batch's base."""

    def __init__(self, offsets: dict[int, int]) -> None:
        super().__init__(f"the table covers {format_offsets(offsets)}")
        self.offsets = offsets


class NoOffsets(Exception):
    """The table has records but no snapshot of its current history says which offsets they
    cover: resuming from the start would write every record twice."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"the Iceberg table {name} has records but no snapshot in its current history "
            f"records the offsets they cover ({OFFSETS_PROPERTY}: the snapshot that did was "
            "expired, or something else wrote the table): not writing it (from the start, "
            "every record would be there twice)")


def sql_catalog(name: str, properties: Mapping[str, str]) -> SqlCatalog:
    props = dict(properties)
    props.pop("type", None)  # strom.lake.settings' catalog type, not SqlCatalog's
    try:
        return SqlCatalog(name, **props)
    except OperationalError:
        # pyiceberg checks for its tables, then creates them: another process (a reader, the
        # Spark load) created them in between, so they exist now
        return SqlCatalog(name, **props)


def load_catalog(name: str, properties: Mapping[str, str]) -> Catalog:
    """The catalog strom.lake.settings.catalog_properties describe: pyiceberg's RestCatalog
    for type rest, its SqlCatalog otherwise."""
    if properties.get("type") == "rest":
        from pyiceberg.catalog.rest import RestCatalog  # (requests: not loaded for SQL ones)

        props = dict(properties)
        props.pop("type")
        return RestCatalog(name, **props)
    return sql_catalog(name, properties)


def open_catalog(settings: LakeSettings) -> Catalog:
    props = dict(settings.catalog_properties)
    for path in local_catalog_paths(props):
        path.mkdir(parents=True, exist_ok=True)
    catalog = load_catalog(settings.catalog_name, props)
    catalog.create_namespace_if_not_exists(settings.namespace)
    return catalog


def offsets_snapshot(table: Table) -> Snapshot | None:
    """The newest snapshot of the table's current history (the current one, its parent, ...)
    whose summary records `strom.offsets`: the current one after a commit of the writer or
    `strom lake maintain`, an older one after a commit that does not record them (Spark's
    rewrite_data_files, a delete). None if there is none. (The Spark load,
    strom.pipelines.iceberg_load.committed_offsets, walks the same way through Iceberg's Java
    API: it runs in PySpark's venv on py4j objects, without pyiceberg.)"""
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        if snapshot.summary is not None and snapshot.summary.get(OFFSETS_PROPERTY):
            return snapshot
    return None


def snapshot_offsets(table: Table) -> dict[int, int]:
    """The next offset per partition the table covers ({} for a table without records).
    Raises NoOffsets for a table with records whose history says nothing of offsets."""
    found = offsets_snapshot(table)
    if found is not None:
        assert found.summary is not None
        return parse_offsets(found.summary.additional_properties)
    current = table.current_snapshot()
    if current is not None and current.summary is not None \
            and int(current.summary.get("total-records") or 0) > 0:
        raise NoOffsets(".".join(table.name()))
    return {}


class TopicTable:
    def __init__(self, catalog: Catalog, namespace: str, topic: str,
                 value_type: IcebergType | None = None) -> None:
        self.value_type = value_type  # None: key_value (the value as bytes)
        self.catalog = catalog
        self.identifier = (namespace, topic)
        self.topic = topic
        self.table: Table | None = None

    @property
    def name(self) -> str:
        return ".".join(self.identifier)

    def open(self) -> dict[int, int]:
        """Loads (or creates) the table; the offsets it covers."""
        try:
            table = self.catalog.load_table(self.identifier)
        except NoSuchTableError:
            try:
                table = self.catalog.create_table(
                    self.identifier, table_schema(self.value_type), partition_spec=BY_DAY,
                    properties={RETRIES_PROPERTY: "0", TOPIC_PROPERTY: self.topic})
                log.info("created the Iceberg table %s for topic %s", self.name, self.topic)
            except TableAlreadyExistsError:  # another writer was first
                table = self.catalog.load_table(self.identifier)
        if table.properties.get(RETRIES_PROPERTY) != "0":
            with table.transaction() as tx:
                tx.set_properties({RETRIES_PROPERTY: "0"})
        self.table = table
        return snapshot_offsets(table)

    def evolve(self, value_type: IcebergType) -> None:
        """Widens the table to a new version of the value schema: new fields become optional
        columns, allowed promotions (int to long, float to double) apply; anything else (a
        changed type) raises, and the table stays as it is. A concurrent commit raises
        CommitFailedException (retries are off): try again later."""
        assert self.table is not None
        with self.table.update_schema() as update:
            update.union_by_name(table_schema(value_type))
        self.table.refresh()
        self.value_type = value_type

    def offsets(self) -> dict[int, int]:
        """The offsets the table covers now (read again from the catalog)."""
        assert self.table is not None
        self.table.refresh()
        return snapshot_offsets(self.table)

    def commit(self, batch: Batch) -> dict[int, int]:
        """Appends the batch as one snapshot; the offsets the table then covers. Raises Fenced
        when the table does not cover exactly the batch's base offsets for its partitions.

        A conflict with a concurrent commit is not retried by pyiceberg (which would re-apply
        the append blindly) but here, after the offsets are checked again: one by a writer of
        other partitions does not fence this one.

        The rows become an Arrow table once, and the batch lets them go then (its offsets
        stay): pyiceberg copies the table again while it writes, and whatever the outcome the
        caller clears the batch or reads its records again."""
        if self.table is None:
            self.open()
        rows = None
        for _ in range(COMMIT_ATTEMPTS):
            stored = self.offsets()
            if not batch.fits(stored):
                raise Fenced(stored)
            covered = batch.offsets(stored)
            assert self.table is not None
            if rows is None:
                rows = arrow_table(batch.rows) if self.value_type is None else \
                    pa.Table.from_pylist(row_dicts(batch.rows),
                                         schema=schema_to_pyarrow(self.table.schema()))
                batch.rows = []
                release_memory()  # their pages, before pyiceberg's copies take others
            try:
                self.table.append(rows,
                                  snapshot_properties={OFFSETS_PROPERTY: format_offsets(covered)})
            except CommitFailedException:
                continue
            return covered
        raise Fenced(self.offsets())
