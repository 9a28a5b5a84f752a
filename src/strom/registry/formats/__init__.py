"""The schema formats the registry accepts, by Confluent's schema type name."""

from __future__ import annotations

from strom.registry.formats.avro import AVRO
from strom.registry.formats.base import SchemaFormat
from strom.registry.formats.json_schema import JSON
from strom.registry.formats.protobuf import FORMAT as PROTOBUF

FORMATS: dict[str, SchemaFormat] = {f.schema_type: f for f in (AVRO, JSON, PROTOBUF)}
