"""What every schema format (Avro, JSON Schema, Protobuf) gives the registry.

A format parses a schema's text (with the texts of the schemas it references, already resolved)
into a `ParsedSchema`, or raises `InvalidSchemaError` (Confluent's error 42201). A parsed schema
gives the text the registry stores (`canonical`, or `normalized` under `?normalize=true`), its
identity (`fingerprint`) and the reasons it cannot read data written with another schema
(`can_read`), as `Incompatibility` items that render in Confluent's detail format.

The reader and writer of a compatibility check are "new" and "old" in Confluent's messages (the
registry's compatibility levels decide which is which), so an incompatibility's `description` is
a template naming them `{reader}` and `{writer}`: `describe` and `render` fill them in.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")

_ROLE = re.compile(r"\{(reader|writer)\}|\{\{|\}\}")


class InvalidSchemaError(Exception):
    """The schema cannot be parsed or is not valid for its format (Confluent's 42201).

    The message is Confluent's: ``Invalid schema of type AVRO, details: <why>``; `details`
    holds the why alone (the parser's own words).
    """

    def __init__(self, schema_type: str, details: str) -> None:
        super().__init__(f"Invalid schema of type {schema_type}, details: {details}")
        self.schema_type = schema_type
        self.details = details


def literal(text: str) -> str:
    """`text` for a description template: its braces doubled, so none reads as a role."""
    return text.replace("{", "{{").replace("}", "}}")


@dataclass(frozen=True)
class Incompatibility:
    """One reason a reader schema cannot read what a writer schema wrote.

    `error_type` is Confluent's name for it (Avro's SchemaIncompatibilityType, JSON Schema's and
    Protobuf's Difference.Type); `path` is where (Avro: a JSON pointer such as
    ``/fields/0/type``; JSON Schema: ``#/properties/a``); `description` is Confluent's sentence,
    a template where ``{reader}`` and ``{writer}`` stand for the two schemas (braces of other
    text doubled, see `literal`); `additional_info` is Avro's extra message (the field, the
    missing symbols, the two types); `schema_type` picks the rendering.
    """

    error_type: str
    description: str
    path: str
    schema_type: str = ""
    additional_info: str | None = None

    def describe(self, reader: str = "reader", writer: str = "writer") -> str:
        """The description with the two schemas named (Confluent names them "new" and "old")."""

        def fill(match: re.Match[str]) -> str:
            token = match.group(0)
            if token == "{{":
                return "{"
            if token == "}}":
                return "}"
            return reader if match.group(1) == "reader" else writer

        return _ROLE.sub(fill, self.description)

    def render(self, reader: str = "new", writer: str = "old") -> str:
        """Confluent's one-item detail, as its 409 and compatibility answers list them."""
        text = self.describe(reader, writer)
        if self.schema_type == "AVRO":
            info = self.additional_info if self.additional_info is not None else ""
            return (f"{{errorType:'{self.error_type}', description:'{text}', "
                    f"additionalInfo:'{info}'}}")
        if self.schema_type == "JSON":
            # Confluent's JSON Schema Difference closes its description with a single quote.
            return f'{{errorType:"{self.error_type}", description:"{text}\'}}'
        if self.schema_type == "PROTOBUF":
            return f'{{errorType:"{self.error_type}", description:"{text}"}}'
        return text


class ParsedSchema(Protocol):
    """A schema of one format, parsed and valid."""

    schema_type: str  # "AVRO" | "JSON" | "PROTOBUF"

    def canonical(self) -> str:
        """The text the registry stores and returns for this schema."""
        ...

    def normalized(self) -> str:
        """The text stored under ``?normalize=true``: equal for schemas that differ only in
        what does not change their meaning (key order, whitespace, alias order, ...)."""
        ...

    def can_read(self, writer: ParsedSchema) -> list[Incompatibility]:
        """Why this schema, as the reader, cannot read data written with `writer` (of the same
        format); empty when it can."""
        ...

    def fingerprint(self) -> str:
        """Identity for "this schema is already registered": the canonical text and the
        references (names and texts)."""
        ...


class SchemaFormat(Protocol):
    """One schema type's parser."""

    schema_type: str

    def parse(self, text: str, references: Mapping[str, str]) -> ParsedSchema:
        """Parse `text`; `references` maps each reference's name to the referenced schema's
        text (every reference, transitively, dependencies first). Raises InvalidSchemaError."""
        ...


def fingerprint(schema_type: str, canonical: str, references: Mapping[str, str]) -> str:
    """A schema's identity: its type, canonical text and references (names and texts)."""
    digest = hashlib.sha256()
    for part in (schema_type, canonical, *(f"{k}\0{v}" for k, v in sorted(references.items()))):
        digest.update(part.encode())
        digest.update(b"\1")
    return digest.hexdigest()
