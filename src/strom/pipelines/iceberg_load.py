"""Lake load into an Apache Iceberg table (batch, exactly once), through Spark's Iceberg runtime.

The Iceberg target of ``strom pipeline run lake-load`` (see lake_load.py for the Parquet one).
Each run reads a topic from the offsets after the last committed ones up to the end offsets seen
when it starts, and appends the records to ``<catalog>.<namespace>.<table>`` in one Iceberg
commit. The table (created on the first run) has one row per record::

    partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY, value <see below>
    [, headers ARRAY<STRUCT<key: STRING, value: BINARY>>]

partitioned by ``days(timestamp)`` (the record timestamp's UTC day). ``value`` is

- a STRUCT decoded from Avro, when a schema registry is given and the topic's value subject
  (``<topic>-value``) has an Avro schema: the table's columns follow the latest registered
  schema, and each record is decoded with the schema whose id it carries (Confluent's wire
  format), resolved to that one;
- a STRUCT parsed from JSON, when columns are declared (Spark DDL, e.g. ``"id BIGINT, name
  STRING"``; a record that is not JSON gets nulls);
- the raw bytes (BINARY) otherwise.

Exactly once, also across kill -9: the offsets a commit covers (every partition's end offset, in
Spark's offset JSON) go into that commit's snapshot summary, as ``strom.offsets``, and a run
starts from the summary of the newest snapshot in the table's current history that has one.
The Iceberg commit is atomic (a compare-and-swap of the table's metadata location in the
catalog), so a run that dies before it leaves only unreferenced data files, and its records are
loaded again by the next run; one that dies after it has nothing left to do.

Two runs at the same time on one table are fenced: a run writes to a branch of its own
(``strom_load_<id>``, made at the main branch's snapshot it planned from), then fast-forwards
main to it, which Iceberg refuses unless main is still an ancestor of the branch. A run that
lost the race leaves nothing in main (its branch is dropped) and fails with FencedLoad: the
next run plans again from what main holds. A branch a killed run left behind is dropped by a
later run once it is an hour old.

This module imports only the standard library and Strom's Spark helpers at import time, and
runs on PySpark 4.1 (the newest Spark Iceberg publishes a runtime for) as well as 4.3.
"""

from __future__ import annotations

import io
import json
import logging
import re
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.pipelines.lake_load import batch_reader, plan_offsets, source_options
from strom.spark import register
from strom.spark.offsets import PartitionOffsets, from_json_dict, to_json_dict

log = logging.getLogger("strom.pipelines")

OFFSETS_PROPERTY = "strom.offsets"  # in each commit's snapshot summary
START_PROPERTY = "strom.start-offsets"
ICEBERG_RUNTIME = "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"
SQLITE_JDBC = "org.xerial:sqlite-jdbc:3.54.1.0"
META_COLUMNS = ("partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY")
HEADERS_COLUMN = "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"


BRANCH_PREFIX = "strom_load_"
STALE_BRANCH_MS = 3_600_000  # a run's branch older than this was left by a killed run


class IcebergLoadError(RuntimeError):
    pass


@dataclass
class IcebergLoadConfig:
    bootstrap_servers: str
    topic: str = "clicks"
    catalog: str = "lake"  # the Spark catalog name; pyiceberg's SqlCatalog must use the same
    catalog_type: str = "jdbc"  # jdbc (a SQLite file) or rest
    catalog_uri: str | None = None  # jdbc: a SQLite file path (default out/lake/catalog.db)
    warehouse: str | None = "out/lake/warehouse"  # a directory or a URI
    namespace: str = "strom"
    table: str | None = None  # default: the topic name, other characters than [A-Za-z0-9_] -> _
    schema_registry_url: str | None = None
    columns: str | None = None  # declared value columns (Spark DDL) of JSON values
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    kafka: dict[str, str] = field(default_factory=dict)
    catalog_properties: dict[str, str] = field(default_factory=dict)  # passed through

    @property
    def table_name(self) -> str:
        return self.table or re.sub(r"[^A-Za-z0-9_]", "_", self.topic)

    @property
    def qualified(self) -> str:
        return f"{self.catalog}.{self.namespace}.{self.table_name}"


@dataclass
class IcebergLoadResult:
    table: str
    start: PartitionOffsets
    end: PartitionOffsets
    records: int
    snapshot_id: int | None
    seconds: float

    @property
    def committed(self) -> bool:
        return self.snapshot_id is not None


# --------------------------------------------------------------------------------------------
# Spark settings
# --------------------------------------------------------------------------------------------


def _file_uri(path: str) -> str:
    return path if "://" in path else Path(path).resolve().as_uri()


def sqlite_path(cfg: IcebergLoadConfig) -> Path:
    uri = cfg.catalog_uri or "out/lake/catalog.db"
    for prefix in ("jdbc:sqlite:", "sqlite:///"):
        if uri.startswith(prefix):
            uri = uri[len(prefix):]
    return Path(uri).resolve()


def spark_conf(cfg: IcebergLoadConfig, user: dict[str, str] | None = None) -> dict[str, str]:
    """The session settings the Iceberg catalog needs. Without ``spark.jars`` or
    ``spark.jars.packages`` among the user's, Spark fetches the Iceberg runtime and sqlite-jdbc
    from Maven Central itself (``spark.jars.packages``)."""
    prefix = f"spark.sql.catalog.{cfg.catalog}"
    conf = {
        "spark.sql.extensions":
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        prefix: "org.apache.iceberg.spark.SparkCatalog",
    }
    if cfg.catalog_type == "jdbc":
        conf[f"{prefix}.type"] = "jdbc"
        conf[f"{prefix}.uri"] = f"jdbc:sqlite:{sqlite_path(cfg)}"
        # the schema pyiceberg's SqlCatalog makes: either side may create the file first
        conf[f"{prefix}.jdbc.schema-version"] = "V1"
    elif cfg.catalog_type == "rest":
        if not cfg.catalog_uri:
            raise IcebergLoadError("a REST catalog needs its URI (--catalog-uri http://...)")
        conf[f"{prefix}.type"] = "rest"
        conf[f"{prefix}.uri"] = cfg.catalog_uri
    else:
        raise IcebergLoadError(f"unknown catalog type {cfg.catalog_type!r}: jdbc or rest")
    if cfg.warehouse:
        conf[f"{prefix}.warehouse"] = _file_uri(cfg.warehouse)
    for key, value in cfg.catalog_properties.items():
        conf[f"{prefix}.{key}"] = value
    user = user or {}
    if "spark.jars" not in user and "spark.jars.packages" not in user:
        conf["spark.jars.packages"] = f"{ICEBERG_RUNTIME},{SQLITE_JDBC}"
    conf.update(user)
    return conf


# --------------------------------------------------------------------------------------------
# value schemas: Avro from the registry, or declared
# --------------------------------------------------------------------------------------------


def _http_json(url: str, timeout: float = 20.0) -> Any:
    req = urllib.request.Request(url, headers={"Accept": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def latest_value_schema(registry_url: str, topic: str) -> dict[str, Any] | None:
    """``{"id", "schema" (parsed JSON)}`` of the topic's latest Avro value schema, or None when
    the subject has none (or its schema is not Avro)."""
    subject = urllib.parse.quote(f"{topic}-value", safe="")
    try:
        found = _http_json(f"{registry_url.rstrip('/')}/subjects/{subject}/versions/latest")
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise
    if found.get("schemaType", "AVRO") != "AVRO":
        log.warning("%s-value has a %s schema; loading raw values", topic, found["schemaType"])
        return None
    return {"id": found["id"], "schema": json.loads(found["schema"])}


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def avro_to_ddl(schema: Any, named: dict[str, Any] | None = None) -> str:
    """The Spark SQL type of an Avro schema (records become STRUCTs)."""
    named = {} if named is None else named
    if isinstance(schema, str):
        primitive = {"boolean": "BOOLEAN", "int": "INT", "long": "BIGINT", "float": "FLOAT",
                     "double": "DOUBLE", "bytes": "BINARY", "string": "STRING"}
        if schema in primitive:
            return primitive[schema]
        if schema in named:
            return avro_to_ddl(named[schema], named)
        raise IcebergLoadError(f"Avro type {schema!r} has no table column type")
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(branches) == 1:
            return avro_to_ddl(branches[0], named)
        raise IcebergLoadError(f"Avro union {schema!r} has no table column type "
                               "(only a union of null and one type)")
    kind = schema["type"]
    logical = schema.get("logicalType")
    if kind == "record":
        named[schema["name"]] = schema
        if "namespace" in schema:
            named[f"{schema['namespace']}.{schema['name']}"] = schema
        fields = ", ".join(f"{_quote(f['name'])}: {avro_to_ddl(f['type'], named)}"
                           for f in schema["fields"])
        return f"STRUCT<{fields}>"
    if kind == "enum":
        named[schema["name"]] = schema
        return "STRING"
    if kind == "fixed":
        named[schema["name"]] = schema
        if logical == "decimal":
            return f"DECIMAL({schema['precision']},{schema.get('scale', 0)})"
        return "BINARY"
    if kind == "array":
        return f"ARRAY<{avro_to_ddl(schema['items'], named)}>"
    if kind == "map":
        return f"MAP<STRING, {avro_to_ddl(schema['values'], named)}>"
    if logical == "decimal" and kind == "bytes":
        return f"DECIMAL({schema['precision']},{schema.get('scale', 0)})"
    if logical == "date" and kind == "int":
        return "DATE"
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return "TIMESTAMP"
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
        return "TIMESTAMP_NTZ"
    return avro_to_ddl(kind, named)


def _plain(schema: Any) -> Any:
    """The schema without the logical types read as Python objects the table does not take
    (uuid: kept as the string; time-*: kept as the number)."""
    if isinstance(schema, list):
        return [_plain(s) for s in schema]
    if isinstance(schema, dict):
        out = {k: _plain(v) for k, v in schema.items()}
        if out.get("logicalType") in ("uuid", "time-millis", "time-micros"):
            del out["logicalType"]
        return out
    return schema


class AvroDecoder:
    """Decodes Confluent-framed Avro values on executors (pickled there): each record with the
    schema whose id it carries, resolved to the table's (reader) schema. Writer schemas are
    fetched from the registry once per id per process."""

    def __init__(self, registry_url: str, reader_schema: Any) -> None:
        self.registry_url = registry_url.rstrip("/")
        self.reader_schema = reader_schema
        self.out_schema: Any = None  # the output's Arrow schema, set on the driver
        self._parsed: dict[int, Any] = {}
        self._reader: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_parsed": {}, "_reader": None}

    def _writer(self, schema_id: int) -> Any:
        from fastavro import parse_schema

        if schema_id not in self._parsed:
            found = _http_json(f"{self.registry_url}/schemas/ids/{schema_id}")
            self._parsed[schema_id] = parse_schema(_plain(json.loads(found["schema"])))
        return self._parsed[schema_id]

    def decode(self, value: bytes | None) -> Any:
        from fastavro import parse_schema, schemaless_reader

        if value is None:
            return None
        if len(value) < 5 or value[0] != 0:
            raise IcebergLoadError("a value is not in the schema registry's wire format "
                                   "(magic byte 0, schema id, Avro)")
        if self._reader is None:
            self._reader = parse_schema(_plain(self.reader_schema))
        writer = self._writer(int.from_bytes(value[1:5], "big"))
        return schemaless_reader(io.BytesIO(value[5:]), writer, self._reader)

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        schema = self.out_schema
        for batch in batches:
            values = [self.decode(v) for v in batch.column("value").to_pylist()]
            columns = [pa.array(values, type=schema.field("value").type) if name == "value"
                       else batch.column(name) for name in schema.names]
            yield pa.RecordBatch.from_arrays(columns, schema=schema)


def value_column(cfg: IcebergLoadConfig) -> tuple[str, AvroDecoder | None]:
    """The table's ``value`` column type, and the Avro decoder when values are Avro."""
    if cfg.schema_registry_url:
        found = latest_value_schema(cfg.schema_registry_url, cfg.topic)
        if found is not None:
            ddl = avro_to_ddl(found["schema"])
            if not ddl.startswith("STRUCT<"):
                raise IcebergLoadError(f"{cfg.topic}-value is not an Avro record")
            return ddl, AvroDecoder(cfg.schema_registry_url, found["schema"])
    if cfg.columns:
        from pyspark.sql.types import StructType

        declared = StructType.fromDDL(cfg.columns)
        assert isinstance(declared, StructType)
        fields = declared.fields
        inner = ", ".join(f"{_quote(f.name)}: {f.dataType.simpleString()}" for f in fields)
        return f"STRUCT<{inner}>", None
    return "BINARY", None


# --------------------------------------------------------------------------------------------
# the table and its committed offsets
# --------------------------------------------------------------------------------------------


def table_ddl(cfg: IcebergLoadConfig, value_type: str) -> str:
    columns = f"{META_COLUMNS}, value {value_type}"
    if cfg.include_headers:
        columns += f", {HEADERS_COLUMN}"
    return (f"CREATE TABLE IF NOT EXISTS {cfg.qualified} ({columns}) USING iceberg "
            f"PARTITIONED BY (days(`timestamp`)) "
            f"TBLPROPERTIES ('format-version'='2', 'strom.topic'='{cfg.topic}')")


def _java_table(spark: Any, cfg: IcebergLoadConfig) -> Any:
    """The table as Iceberg's Java ``Table`` (through the Spark catalog), or None if absent."""
    jvm = spark.sparkContext._jvm
    namespace = spark.sparkContext._gateway.new_array(jvm.java.lang.String, 1)
    namespace[0] = cfg.namespace
    ident = jvm.org.apache.spark.sql.connector.catalog.Identifier.of(namespace, cfg.table_name)
    catalog = spark._jsparkSession.sessionState().catalogManager().catalog(cfg.catalog)
    if not catalog.tableExists(ident):
        return None
    table = catalog.loadTable(ident).table()
    table.refresh()
    return table


def committed_offsets(spark: Any, cfg: IcebergLoadConfig) -> PartitionOffsets:
    """The offsets after the last loaded record of each partition, from the newest snapshot of
    the table's current history whose summary has them (empty before the first load). Walks
    the snapshots on the driver (Iceberg's Java API): no Spark job."""
    table = _java_table(spark, cfg)
    snapshot = table.currentSnapshot() if table is not None else None
    current = snapshot
    while snapshot is not None:
        found = snapshot.summary().get(OFFSETS_PROPERTY)
        if found is not None:
            return from_json_dict(json.loads(found))
        parent = snapshot.parentId()  # e.g. a compaction's snapshot: look further back
        snapshot = table.snapshot(parent) if parent is not None else None
    if current is not None and int(current.summary().get("total-records") or 0) > 0:
        # loading from the earliest offsets again would write every record twice
        raise IcebergLoadError(
            f"{cfg.qualified} has records but no snapshot in its history says which offsets "
            f"they cover ({OFFSETS_PROPERTY}; expired, or written by something else): "
            "refusing to load from the start")
    return {}


class FencedLoad(IcebergLoadError):
    """Another run committed to the table after this one planned: nothing of this run is in
    the table."""


def _base_snapshot(table: Any) -> int:
    """The main branch's snapshot a run branches from (an empty table gets an empty snapshot
    first, recording no offsets, so that there is one)."""
    current = table.currentSnapshot()
    if current is None:
        table.newAppend().set(OFFSETS_PROPERTY, "{}").commit()
        table.refresh()
        current = table.currentSnapshot()
    return int(current.snapshotId())


def _drop_stale_branches(table: Any, now_ms: int) -> None:
    """Branches of killed runs (their data files stay until snapshots expire)."""
    stale = [name for name, ref in dict(table.refs()).items()
             if str(name).startswith(BRANCH_PREFIX) and ref.isBranch()
             and now_ms - table.snapshot(ref.snapshotId()).timestampMillis() > STALE_BRANCH_MS]
    for name in stale:
        try:
            table.manageSnapshots().removeBranch(name).commit()
            log.warning("dropped the branch %s a killed load left behind", name)
        except Exception as exc:  # another run dropped it first
            log.info("branch %s not dropped: %s", name, exc)


def _fast_forward(spark: Any, cfg: IcebergLoadConfig, branch: str) -> None:
    """main := the branch's head, if main is still an ancestor of it (else FencedLoad)."""
    table = _java_table(spark, cfg)
    try:
        table.manageSnapshots().fastForwardBranch("main", branch).commit()
    except Exception as exc:  # py4j's wrapper of Iceberg's ValidationException
        text = str(exc)
        if "ancestor" not in text and "ValidationException" not in text:
            raise
        raise FencedLoad(f"{cfg.qualified}: another load committed while this one ran; "
                         "nothing of this run is in the table: run again") from None


def plan(cfg: IcebergLoadConfig, done: PartitionOffsets
         ) -> tuple[PartitionOffsets, PartitionOffsets]:
    """(start, end) of the next run: after the committed offsets (or earliest) to the end now."""
    return plan_offsets(source_options(cfg.bootstrap_servers, cfg.topic, cfg.kafka), done)


def run(spark: Any, cfg: IcebergLoadConfig) -> IcebergLoadResult:
    """Append everything between the committed offsets and the current end offsets."""
    from pyspark.sql import functions as F

    began = time.monotonic()
    register(spark)
    if cfg.catalog_type == "jdbc":  # SQLite makes the file, not its directory
        sqlite_path(cfg).parent.mkdir(parents=True, exist_ok=True)
    value_type, decoder = value_column(cfg)
    if _java_table(spark, cfg) is None:
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog}.{cfg.namespace}")
        spark.sql(table_ddl(cfg, value_type))
    table = _java_table(spark, cfg)
    _drop_stale_branches(table, int(time.time() * 1000))
    base = _base_snapshot(table)  # before the offsets: they are read from it or its parents
    start, end = plan(cfg, committed_offsets(spark, cfg))
    log.info("%s: planned in %.1fs", cfg.qualified, time.monotonic() - began)
    todo = {tp: off for tp, off in end.items() if off > start.get(tp, off) or start.get(tp) == -2}
    if not todo:
        return IcebergLoadResult(cfg.qualified, start, end, 0, None, time.monotonic() - began)

    extra = ["headers"] if cfg.include_headers else []
    df = batch_reader(spark, cfg, start, end).load().select(
        "partition", "offset", "timestamp", "key", "value", *extra)
    if decoder is not None:
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.sql.types import StructType

        schema = f"{META_COLUMNS}, value {value_type}" + (f", {HEADERS_COLUMN}" if extra else "")
        spark_schema = StructType.fromDDL(schema)
        assert isinstance(spark_schema, StructType)
        decoder.out_schema = to_arrow_schema(spark_schema)
        df = df.mapInArrow(decoder, spark_schema)
    elif value_type != "BINARY":
        df = df.withColumn("value", F.from_json(F.col("value").cast("string"), value_type))
    log.info("loading %s from %s to %s", cfg.qualified, to_json_dict(start), to_json_dict(end))
    branch = f"{BRANCH_PREFIX}{uuid.uuid4().hex[:12]}"
    table.manageSnapshots().createBranch(branch, base).commit()
    try:
        (df.writeTo(f"{cfg.qualified}.branch_{branch}")
           .option(f"snapshot-property.{OFFSETS_PROPERTY}", json.dumps(to_json_dict(end)))
           .option(f"snapshot-property.{START_PROPERTY}", json.dumps(to_json_dict(start)))
           .append())
        _fast_forward(spark, cfg, branch)
    finally:
        try:
            _java_table(spark, cfg).manageSnapshots().removeBranch(branch).commit()
        except Exception as exc:  # dropped later, once stale
            log.warning("branch %s of this load not dropped: %s", branch, exc)
    log.info("%s: committed in %.1fs", cfg.qualified, time.monotonic() - began)
    snap = _java_table(spark, cfg).currentSnapshot()
    return IcebergLoadResult(cfg.qualified, start, end,
                             int(snap.summary().get("added-records") or 0), snap.snapshotId(),
                             time.monotonic() - began)
