"""The schema-validation scenario's records, registry calls and rows (no broker)."""

from __future__ import annotations

import io
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import fastavro
import pytest

# bench/ lives at the repository root, outside the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench import avro_records
from bench.brokers import schema_registry_url, strom_spec, tansu_spec, with_schema_registry
from bench.client import _values
from bench.config import QUICK
from bench.report import Outcome, build_rows
from bench.scenarios import BY_NAME
from bench.scenarios.schema_validation import (
    AvroProduce,
    RegistryError,
    register,
    stand_in,
    wait_registry,
)


def test_frame_is_magic_byte_then_a_big_endian_id() -> None:
    assert avro_records.frame(0x01020304, b"avro") == b"\x00\x01\x02\x03\x04avro"
    with pytest.raises(ValueError):
        avro_records.frame(-1, b"")
    with pytest.raises(ValueError):
        avro_records.frame(1 << 31, b"")


def test_body_length_counts_the_strings_own_length_prefix() -> None:
    assert avro_records.body_length(0, 64) == 63  # 63 characters and a 1-byte length
    assert avro_records.body_length(0, 66) == 64  # from 64 characters on, a 2-byte length
    with pytest.raises(ValueError):  # no string encodes as 65 bytes
        avro_records.body_length(0, 65)
    assert avro_records.body_length(34, 1019) == 983


def test_the_schema_has_ten_fields() -> None:
    schema = json.loads(avro_records.schema_text())
    assert len(schema["fields"]) == 10
    avro_records.parsed_schema()  # fastavro takes it


def test_values_are_1_kib_framed_avro_data_of_the_schema() -> None:
    values = avro_records.values(42, count=200)
    assert len(values) == 200 and len(set(values)) == 200
    schema = avro_records.parsed_schema()
    for v in values:
        assert len(v) == 1024
        assert v[0] == 0 and int.from_bytes(v[1:5], "big") == 42
        body = io.BytesIO(v[5:])
        datum = fastavro.schemaless_reader(body, schema, None)
        assert body.tell() == len(v) - 5  # nothing left over, as Strom's decode mode checks
        assert isinstance(datum, dict) and len(datum) == 10
    assert values == avro_records.values(42, count=200)  # the same records every time
    assert avro_records.values(7, count=3, size=2048)[0][5:] != values[0][5:]


def test_a_produce_job_cycles_its_pool() -> None:
    plain = list(_values({"size": 100}, 5))
    assert len(plain) == 5 and len(set(plain)) == 1 and len(plain[0]) == 100
    avro = list(_values({"size": 1024, "avro": 9, "pool": 3}, 7))
    assert avro[:3] == avro[3:6] and avro[6] == avro[0] and len(set(avro)) == 3
    assert all(v[:5] == b"\x00\x00\x00\x00\x09" for v in avro)


def test_strom_serves_a_registry_only_when_asked() -> None:
    spec = strom_spec("strom")
    assert schema_registry_url(spec) is None
    served = with_schema_registry(spec, "http://127.0.0.1:9")
    assert schema_registry_url(served) == "http://127.0.0.1:9"
    argv = served.command(9092, Path("/data"))
    assert argv[:len(spec.command(9092, Path("/data")))] == spec.command(9092, Path("/data"))
    assert argv[-2:] == ["--override", "schema.registry.listeners=http://127.0.0.1:9"]
    with pytest.raises(ValueError):
        with_schema_registry(tansu_spec("tansu"), "http://127.0.0.1:9")


class _Registry(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, str, Any]] = []

    def do_GET(self) -> None:
        self._answer(200, [])

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append((self.command, self.path, self.headers["Content-Type"], body))
        if "refused" in self.path:
            self._answer(422, {"error_code": 42201, "message": "Invalid schema"})
        else:
            self._answer(200, {"id": 7})

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def registry_url() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Registry.seen.clear()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_register_posts_the_schema_under_its_subject(registry_url: str) -> None:
    wait_registry(registry_url, 5)
    assert register(registry_url, "bench/x-value", '{"type": "int"}') == 7
    method, path, content_type, body = _Registry.seen[0]
    assert (method, path) == ("POST", "/subjects/bench%2Fx-value/versions")
    assert content_type == "application/vnd.schemaregistry.v1+json"
    assert body == {"schema": '{"type": "int"}', "schemaType": "AVRO"}
    with pytest.raises(RegistryError, match="422"):
        register(registry_url, "refused-value", "{}")


def test_rows_read_as_the_issues_ratios() -> None:
    scenario = BY_NAME["produce-1k-avro"]
    assert isinstance(scenario, AvroProduce)
    rows_of = scenario.rows(QUICK)
    keys = [m.key for m in rows_of.metrics]
    assert len(keys) == len(set(keys))
    strom = Outcome(metrics={"plain_mbs": 500.0, "id_mbs": 420.0, "decode_mbs": 90.0,
                             "id_vs_plain": 0.84, "decode_vs_plain": 0.18, "rss_mb": 100.0})
    kafka = Outcome(metrics={"plain_mbs": 400.0, "rss_mb": 1000.0})
    stand_in(kafka)
    assert kafka.metrics["id_mbs"] == kafka.metrics["decode_mbs"] == 400.0
    runs = {"produce-1k-avro": {"Strom": [strom], "Kafka": [kafka]}}
    rows = {r.metric: r for r in build_rows([rows_of], runs, "Strom", ["Kafka"], {})}
    unvalidated = rows["produce, unvalidated topic (MB/s)"]
    assert (unvalidated.ratio, unvalidated.target) == ("1.25x", "")
    id_mode = rows["produce, validated topic, id mode (peers: unvalidated) (MB/s)"]
    assert (id_mode.ratio, id_mode.target, id_mode.verdict) == ("1.05x", ">= 1x Kafka", "pass")
    decode = rows["produce, validated topic, decode mode (peers: unvalidated) (MB/s)"]
    assert (decode.ratio, decode.target, decode.verdict) == ("0.23x", ">= 0.4x Kafka", "FAIL")
    same = rows["id mode / unvalidated, same broker (x)"]
    assert (same.subject, same.peer, same.target, same.verdict) == ("0.84", "n/a", ">= 0.8 x",
                                                                    "pass")
    assert "no schema validation" in same.notes
