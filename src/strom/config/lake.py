"""Iceberg topics' broker configs (`iceberg.*`): Strom's own. Apache Kafka writes no tables; the
names follow Iceberg's catalog properties, as Iceberg's Kafka Connect sink names its
`iceberg.catalog.*` settings. Off by default. Every other `iceberg.catalog.<name>` is handed to
pyiceberg's catalog as `<name>` (strom.lake.settings)."""

from __future__ import annotations

from strom.config.defs import ConfigDef, ConfigType, one_of

T = ConfigType

CATALOG_PREFIX = "iceberg.catalog."

LAKE_CONFIGS = (
    ConfigDef("iceberg.enable", T.BOOLEAN, False,
              "Strom's own: run the lake writer, a process of its own and a client of this "
              "broker, that appends the records of topics with iceberg.mode other than "
              "disabled to Iceberg tables", read_only=True),
    ConfigDef("iceberg.catalog.type", T.STRING, "sql",
              "Strom's own (Iceberg's catalog type): sql, a SQL catalog (pyiceberg's "
              "SqlCatalog; a SQLite file Spark's JdbcCatalog can share), or rest, an Iceberg "
              "REST catalog (pyiceberg's RestCatalog) at iceberg.catalog.uri",
              one_of("sql", "rest"), read_only=True),
    ConfigDef("iceberg.catalog.uri", T.STRING, "",
              "Strom's own (Iceberg's uri): for sql the catalog's database, e.g. "
              "sqlite:////var/lib/strom/catalog.db (empty: iceberg/catalog.db under the first "
              "log dir); for rest the catalog's http(s) URL, e.g. http://127.0.0.1:8181 "
              "(required)", read_only=True),
    ConfigDef("iceberg.catalog.warehouse", T.STRING, "",
              "Strom's own (Iceberg's warehouse): where new tables' files go, e.g. "
              "file:///var/lib/strom/warehouse; empty: for sql iceberg/warehouse under the "
              "first log dir, for rest the REST server's choice", read_only=True),
    ConfigDef("iceberg.catalog.name", T.STRING, "strom",
              "Strom's own: the catalog's name, part of each table's key in a SQL catalog "
              "(Spark's catalog name must be the same to see the tables)", read_only=True),
    ConfigDef("iceberg.namespace", T.STRING, "strom",
              "Strom's own: the Iceberg namespace of the topics' tables "
              "(<namespace>.<topic>)", read_only=True),
)
