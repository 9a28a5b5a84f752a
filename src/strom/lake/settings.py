"""What the broker hands the lake writer (one JSON line on its stdin), and the settings the
writer derives from it: the broker's config as written and how to reach the broker."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strom.common.dead_letters import PREFIX_CONFIG
from strom.common.helper_child import JsonLine
from strom.config.broker import BrokerConfig
from strom.config.lake import CATALOG_PREFIX
from strom.security.tls import LoopbackTls

# iceberg.catalog.* configs Strom reads itself; the others go to pyiceberg as they are
_OWN = ("type", "uri", "warehouse", "name")


class CatalogConfigError(ValueError):
    """The iceberg.catalog.* configs name no catalog the lake writer can open (one line)."""


@dataclass
class Handoff(JsonLine):
    config: dict[str, str]  # the broker's properties as written (file plus overrides)
    bootstrap: str  # host:port of the broker's listener this process connects to
    security_protocol: str = "PLAINTEXT"  # or SSL, on a broker with TLS listeners only
    registry_url: str | None = None  # the broker's schema registry, if it serves one
    tls: dict[str, str | None] | None = None  # a LoopbackTls, for an SSL listener


@dataclass
class LakeSettings:
    handoff: Handoff
    catalog_name: str
    catalog_properties: dict[str, str]  # pyiceberg's, with the type (sql, rest) as "type"
    namespace: str
    broker_id: int | None = None  # the partitions it leads are this writer's
    refresh_s: float = 2.0  # how often the topics' iceberg.* configs are read again
    dlq_prefix: str = "dlq."  # errors.deadletterqueue.topic.name.prefix: allowed DLQ names

    @classmethod
    def of(cls, handoff: Handoff) -> LakeSettings:
        config = BrokerConfig.load(None, handoff.config)
        return cls(handoff, config.get("iceberg.catalog.name"),
                   catalog_properties(config), config.get("iceberg.namespace"),
                   config.broker_id, dlq_prefix=config.get(PREFIX_CONFIG) or "")

    def client_base(self) -> dict[str, Any]:
        """librdkafka settings of this process's clients."""
        tls = LoopbackTls.of(self.handoff.tls)
        return {"bootstrap.servers": self.handoff.bootstrap,
                "security.protocol": self.handoff.security_protocol,
                "client.id": "strom-lake", "log_level": 3,
                **(tls.librdkafka() if tls is not None else {})}


def catalog_properties(config: BrokerConfig) -> dict[str, str]:
    """pyiceberg catalog properties, with the type (sql or rest) under "type", and every other
    iceberg.catalog.<name> as <name> (credential, token, a REST catalog's headers, ...).

    sql: uri and warehouse default to files under the first log dir; schema version v1 (the
    one Spark's JdbcCatalog shares). rest: uri is the catalog's http(s) URL, required (raises
    CatalogConfigError); the warehouse is passed only if set (the REST server may choose)."""
    kind = config.get("iceberg.catalog.type")
    if kind == "rest":
        props = {"type": kind, "uri": rest_uri(config.get("iceberg.catalog.uri"))}
        if config.get("iceberg.catalog.warehouse"):
            props["warehouse"] = config.get("iceberg.catalog.warehouse")
    else:
        base = Path(config.log_dirs[0]).absolute() / "iceberg"
        uri = config.get("iceberg.catalog.uri") or f"sqlite:///{base / 'catalog.db'}"
        warehouse = config.get("iceberg.catalog.warehouse") or (base / "warehouse").as_uri()
        props = {"type": kind, "uri": uri, "warehouse": warehouse, "schema_version": "v1"}
    for name, value in {**config.raw, **config.unknown}.items():
        if name.startswith(CATALOG_PREFIX) and name[len(CATALOG_PREFIX):] not in _OWN:
            props[name[len(CATALOG_PREFIX):]] = value
    return props


def rest_uri(uri: str) -> str:
    """A REST catalog's iceberg.catalog.uri, checked: an http:// or https:// URL."""
    if not uri:
        raise CatalogConfigError("iceberg.catalog.type=rest needs iceberg.catalog.uri, the "
                                 "REST catalog's URL (e.g. http://127.0.0.1:8181)")
    if not uri.lower().startswith(("http://", "https://")):
        raise CatalogConfigError(f"iceberg.catalog.type=rest needs an http:// or https:// "
                                 f"iceberg.catalog.uri, not {uri!r}")
    return uri


def local_catalog_paths(props: dict[str, str]) -> list[Path]:
    """Directories a local catalog needs before it opens (the SQLite file's, the warehouse);
    none for a REST catalog (its server makes its own)."""
    if props.get("type") == "rest":
        return []
    paths = []
    uri = props.get("uri", "")
    if uri.startswith("sqlite:///"):
        paths.append(Path(uri[len("sqlite:///"):]).parent)
    warehouse = props.get("warehouse", "")
    if warehouse.startswith("file://"):
        paths.append(Path(warehouse[len("file://"):]))
    return paths
