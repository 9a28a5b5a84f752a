"""What the value format tests share: a registry stubbed by its answers, Confluent's framing,
and decoded values written to a real table (SQLite catalog) and read back."""

from __future__ import annotations

import email.message
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from strom.config.broker import BrokerConfig
from strom.lake.mapping import Batch, Row
from strom.lake.settings import Handoff, LakeSettings
from strom.lake.value_schema import ValueSchema
from strom.lake.writer import TopicTable, open_catalog

OUT_OF_REACH = 5  # the schema id whose fetch finds the registry down


def stub_registry(monkeypatch: pytest.MonkeyPatch, answers: dict[str, dict[str, Any]]) -> None:
    """The registry answers `answers` (path -> JSON), 404 to any other path, and cannot be
    reached for schema id OUT_OF_REACH."""

    def get(self: ValueSchema, path: str) -> dict[str, Any]:
        if path == f"/schemas/ids/{OUT_OF_REACH}":
            raise OSError("connection refused")
        if path not in answers:
            raise urllib.error.HTTPError(path, 404, "Not Found", email.message.Message(), None)
        return answers[path]

    monkeypatch.setattr(ValueSchema, "_get", get)


def framed(schema_id: int, payload: bytes) -> bytes:
    return b"\0" + schema_id.to_bytes(4, "big") + payload


def written(tmp_path: Path, decoder: ValueSchema, values: list[bytes | None]) -> list[Any]:
    """The values decoded, appended to a table of the decoder's type, and read back."""
    config = {"log.dirs": str(tmp_path), "iceberg.enable": "true"}
    BrokerConfig.load(None, config)
    settings = LakeSettings.of(Handoff(config, "127.0.0.1:9092"))
    table = TopicTable(open_catalog(settings), settings.namespace, "values", decoder.type)
    table.open()
    batch = Batch()
    batch.clear({})
    for offset, value in enumerate(values):
        batch.add(Row(0, offset, 1_700_000_000_000, b"k", value, (),
                      decoder.decode(value)))
    table.commit(batch)
    assert table.table is not None
    rows = table.table.scan().to_arrow().to_pylist()
    return [r["value"] for r in sorted(rows, key=lambda r: r["offset"])]
