"""`iceberg.mode=value_schema`: the table's `value` column takes the type of the topic's value
schema in Strom's registry (the latest version of `<topic>-value` when the writer starts), and
each value is decoded into it with the schema its own id names (Confluent's framing: a zero
byte, a 4-byte id, then the format's payload), then fitted to the table's type: a value
written with another version of the subject reads as the latest one.

Avro (`avro`), JSON Schema (`json_schema`) and Protobuf (`protobuf`, whose payload starts
with the message indexes) values; each module says how its schemas map to Iceberg types, and
which shapes it refuses (Unsupported, when the table is made)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from .avro import iceberg_type
from .common import FIRST_ID, RegistryUnavailable, Undecodable, Unsupported, Values

__all__ = ["FIRST_ID", "TIMEOUT_S", "RegistryUnavailable", "TableBehind", "Undecodable",
           "Unsupported", "ValueSchema", "iceberg_type"]

TIMEOUT_S = 10.0

def _values(kind: str) -> Any:
    """The class of a schema type's values (its module imported when first used)."""
    if kind == "AVRO":
        from .avro import AvroValues

        return AvroValues
    if kind == "JSON":
        from .json_schema import JsonValues

        return JsonValues
    if kind == "PROTOBUF":
        from .protobuf import ProtobufValues

        return ProtobufValues
    raise Unsupported(f"{kind} values")


class TableBehind(RegistryUnavailable):
    """A value written with a version of the subject the table could not take: it waits (an
    ERROR line said why) until the table or the subject changes."""


class ValueSchema:
    """A topic's value schema from the registry, and the decoder of its values."""

    def __init__(self, registry_url: str, subject: str) -> None:
        self.url = registry_url.rstrip("/")
        self.subject = subject
        self.held: dict[int, str] = {}  # schema ids whose values wait, and why
        latest = self._get(self._latest_path())
        self.latest_id = int(latest["id"])
        self.version = latest.get("version")
        self.kind = str(latest.get("schemaType", "AVRO"))
        cls = _values(self.kind)
        references = self.references(latest)
        self.values: Values = cls(latest, references)
        self.type = self.values.type
        try:
            writer = self.values.writer(latest, references)
        except Undecodable as exc:
            raise Unsupported(str(exc)) from None
        self.writers: dict[int, Any] = {int(latest["id"]): writer}

    def _latest_path(self) -> str:
        return f"/subjects/{urllib.parse.quote(self.subject, safe='')}/versions/latest"

    def latest_now(self) -> tuple[int, Any]:
        """(schema id, version) of the subject's latest version now (OSError when the registry
        cannot be reached)."""
        latest = self._get(self._latest_path())
        return int(latest["id"]), latest.get("version")

    def _get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + path, timeout=TIMEOUT_S) as answer:
            found: dict[str, Any] = json.loads(answer.read())
            return found

    def references(self, registered: dict[str, Any]) -> dict[str, str]:
        """The texts of a schema's references, and of theirs (by reference name)."""
        out: dict[str, str] = {}
        pending = list(registered.get("references") or [])
        while pending:
            ref = pending.pop()
            if ref["name"] in out:
                continue
            subject = urllib.parse.quote(str(ref["subject"]), safe="")
            found = self._get(f"/subjects/{subject}/versions/{int(ref['version'])}")
            out[ref["name"]] = found["schema"]
            pending.extend(found.get("references") or [])
        return out

    def writer(self, schema_id: int) -> Any:
        found = self.writers.get(schema_id)
        if found is None:
            try:
                registered = self._get(f"/schemas/ids/{schema_id}")
                kind = registered.get("schemaType", "AVRO")
                if kind != self.kind:
                    raise Undecodable(f"schema id {schema_id} is {kind}, not {self.kind}")
                references = self.references(registered)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    raise Undecodable(f"schema id {schema_id} is not registered (or one of "
                                      "its references)") from None
                raise RegistryUnavailable(f"schema id {schema_id}: {exc}") from None
            except OSError as exc:
                raise RegistryUnavailable(f"schema id {schema_id}: {exc}") from None
            try:
                found = self.values.writer(registered, references)
            except Undecodable as exc:
                raise Undecodable(f"schema id {schema_id}: {exc}") from None
            self.writers[schema_id] = found
        return found

    def decode(self, data: bytes | None) -> Any:
        if data is None:
            return None
        if len(data) < 5 or data[0] != 0:
            raise Undecodable("no schema id (Confluent's framing: a zero byte, a 4-byte id)")
        schema_id = int.from_bytes(data[1:5], "big")
        if schema_id in self.held:
            raise TableBehind(self.held[schema_id])
        return self.values.decode(self.writer(schema_id), data[5:])
