"""A value_schema table follows its subject: a new version that only adds an optional field
widens the table (a new column, filled from then on); one that changes a field's type does
not fit, so its values wait with an ERROR line, and nothing is written or skipped."""

from __future__ import annotations

import io
import json
import logging
import threading
from pathlib import Path
from typing import Any

import fastavro
import pytest

from strom.lake.mapping import Row
from strom.lake.process import LakeWriter, TopicConfig
from strom.lake.settings import Handoff, LakeSettings
from strom.lake.writer import open_catalog

from .test_process import Assignments
from .value_schema.stubs import framed, stub_registry

TOPIC = "events"
V1 = {"type": "record", "name": "E", "fields": [{"name": "id", "type": "long"}]}
V2 = {"type": "record", "name": "E", "fields": [
    {"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None}]}
V3 = {"type": "record", "name": "E", "fields": [
    {"name": "id", "type": "string"}, {"name": "note", "type": ["null", "string"],
                                       "default": None}]}


def _avro(schema: dict[str, Any], value: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def _register(answers: dict[str, dict[str, Any]], version: int, schema: dict[str, Any]) -> None:
    registered = {"id": version, "version": version, "schema": json.dumps(schema)}
    answers[f"/subjects/{TOPIC}-value/versions/latest"] = registered
    answers[f"/schemas/ids/{version}"] = registered


def test_the_table_follows_the_subject_and_refuses_a_version_that_does_not_fit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    answers: dict[str, dict[str, Any]] = {}
    stub_registry(monkeypatch, answers)
    _register(answers, 1, V1)
    settings = LakeSettings.of(Handoff({"log.dirs": str(tmp_path)}, "127.0.0.1:9092",
                                       registry_url="http://registry"))
    consumer = Assignments()
    writer = LakeWriter(settings, threading.Event(), open_catalog(settings), None, consumer)
    writer.start(TOPIC, TopicConfig("value_schema", 500, {0: 0}))
    state = writer.topics[TOPIC]

    def read(offset: int, schema_id: int, schema: dict[str, Any], value: dict[str, Any]) -> None:
        state.batch.add(Row(0, offset, 1_700_000_000_000, None, framed(schema_id,
                                                                       _avro(schema, value))))

    def values() -> list[dict[str, Any]]:
        table = state.table.table
        table.refresh()
        rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
        return [r["value"] for r in rows]

    read(0, 1, V1, {"id": 1})
    writer.flush(TOPIC)
    assert values() == [{"id": 1}]

    _register(answers, 2, V2)  # adds an optional field: the table gains a column
    read(1, 2, V2, {"id": 2, "note": "two"})
    read(2, 1, V1, {"id": 3})  # an older writer still reads as the latest version
    writer.flush(TOPIC)
    assert values() == [{"id": 1, "note": None}, {"id": 2, "note": "two"},
                        {"id": 3, "note": None}]
    assert state.decoder.latest_id == 2

    _register(answers, 3, V3)  # id becomes a string: the table cannot take it
    read(3, 2, V2, {"id": 4, "note": None})
    read(4, 3, V3, {"id": "five", "note": None})
    with caplog.at_level(logging.ERROR, logger="strom.lake"):
        writer.flush(TOPIC)
    assert [v["id"] for v in values()] == [1, 2, 3, 4]  # the fitting one before it is written
    assert state.table.offsets() == {0: 4} and consumer.reading == {0: 4}
    assert "cannot take version 3 of events-value" in caplog.text
    assert str(state.table.table.schema().find_field("value.id").field_type) == "long"
    caplog.clear()
    read(4, 3, V3, {"id": "five", "note": None})  # read again: it still waits
    with caplog.at_level(logging.ERROR, logger="strom.lake"):
        writer.flush(TOPIC)
    assert state.table.offsets() == {0: 4} and "does not fit the table" in caplog.text
