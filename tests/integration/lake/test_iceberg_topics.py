"""Iceberg topics (issue 33 point 2): with iceberg.enable the broker runs a lake writer that
appends an iceberg.mode=key_value topic's records to the table <iceberg.namespace>.<topic>,
one row per record, exactly once across kill -9 of the broker and of the writer itself (each
snapshot's summary records the offsets it covers); a topic altered to key_value becomes a table
from its first record; one left disabled has none; value_schema mode decodes Avro values into
a typed value column and holds back (and reports) a value that does not decode."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import fastavro
import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError

from strom.lake import duckdb as lake_duckdb
from strom.lake.settings import Handoff

from .. import clients as kc
from ..rest.conftest import started_url
from .tables import T, messages, table_rows, wait_exactly


def _catalog(tmp_path: Path) -> dict[str, str]:
    return {"iceberg.catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
            "iceberg.catalog.warehouse": (tmp_path / "warehouse").as_uri()}


def _duckdb_rows(catalog: SqlCatalog, topic: str) -> list[dict]:
    """The table's rows as DuckDB reads them (from its current metadata file, extensions from
    their wheels), by partition and offset."""
    table = catalog.load_table(("strom", topic))
    read = lake_duckdb.scan(lake_duckdb.connect(), table.metadata_location)
    return read.sort_by([("partition", "ascending"), ("offset", "ascending")]).to_pylist()


def _writer_pid(broker_pid: int) -> int:
    deadline = time.monotonic() + T
    while True:
        for task in Path(f"/proc/{broker_pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                if b"strom.lake" in Path(f"/proc/{child}/cmdline").read_bytes():
                    return int(child)
        assert time.monotonic() < deadline, "the lake writer's process runs"
        time.sleep(0.05)  # poll interval, not synchronisation


def _set_key_value(bootstrap: str, topic: str) -> None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in (("iceberg.mode", "key_value"), ("iceberg.commit.interval.ms", "300"))])
    admin = kc.admin(bootstrap)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(T)


def test_records_land_in_the_table_exactly_once_across_kill_9(make_broker, unique_topic,
                                                             tmp_path) -> None:
    broker = make_broker({"iceberg.enable": "true", **_catalog(tmp_path)})
    topic = unique_topic("lake")
    plain = unique_topic("plain")
    later = unique_topic("later")
    kc.create_topic(broker.bootstrap, topic, 2, {"iceberg.mode": "key_value",
                                                 "iceberg.commit.interval.ms": "500"})
    kc.create_topic(broker.bootstrap, plain, 1)
    kc.create_topic(broker.bootstrap, later, 2)
    delivered = kc.produce(broker.bootstrap, topic, messages(0, 200))
    kc.produce(broker.bootstrap, plain, messages(0, 2)[:1])
    delivered_later = kc.produce(broker.bootstrap, later, messages(0, 30))
    catalog = SqlCatalog("strom", uri=f"sqlite:///{tmp_path}/catalog.db",
                         warehouse=(tmp_path / "warehouse").as_uri())
    rows = wait_exactly(catalog, topic, delivered)
    _set_key_value(broker.bootstrap, later)  # an Iceberg topic from now on, from its start
    delivered_later += kc.produce(broker.bootstrap, later, messages(30, 30))
    by_offset = {(r["partition"], r["offset"]): r for r in rows}
    for m in delivered:
        row = by_offset[(m.partition, m.offset)]
        assert (row["key"], row["value"]) == (m.key, m.value)
        assert row["headers"] == [{"name": "n", "value": m.headers[0][1]}]
        assert row["timestamp"].timestamp() * 1000 == pytest.approx(m.timestamp, abs=1)
    table = catalog.load_table(("strom", topic))
    assert str(table.spec().fields[0].transform) == "day"
    with pytest.raises(NoSuchTableError):  # iceberg.mode is disabled by default
        catalog.load_table(("strom", plain))
    wait_exactly(catalog, later, delivered_later)

    delivered += kc.produce(broker.bootstrap, topic, messages(200, 300))
    broker.restart(kill=True)  # kill -9 mid-stream: the writer goes with it
    delivered += kc.produce(broker.bootstrap, topic, messages(500, 100))
    wait_exactly(catalog, topic, delivered)

    assert broker.pid is not None
    writer = _writer_pid(broker.pid)
    delivered += kc.produce(broker.bootstrap, topic, messages(600, 200))
    os.kill(writer, signal.SIGKILL)  # the broker starts it again; it resumes from the table
    delivered += kc.produce(broker.bootstrap, topic, messages(800, 100))
    wait_exactly(catalog, topic, delivered)
    assert "lake writer's process" in broker.log_text()

    # a second writer of the same tables (as a zombie would be): each record is still written
    # once, whichever commits first
    handoff = Handoff(dict(broker.overrides), broker.bootstrap)
    rogue_log = (tmp_path / "rogue.log").open("wb")
    rogue = subprocess.Popen([sys.executable, "-m", "strom.lake"], stdin=subprocess.PIPE,
                             stderr=rogue_log)
    try:
        assert rogue.stdin is not None
        rogue.stdin.write(handoff.to_line().encode())
        rogue.stdin.flush()
        deadline = time.monotonic() + T
        while f"topic {topic} -> Iceberg table".encode() not in \
                (tmp_path / "rogue.log").read_bytes():
            assert time.monotonic() < deadline, "the second writer reads the topic"
            time.sleep(0.05)  # poll interval, not synchronisation
        for start in range(900, 1300, 100):
            delivered += kc.produce(broker.bootstrap, topic, messages(start, 100))
        wait_exactly(catalog, topic, delivered)
    finally:
        if rogue.stdin is not None:
            rogue.stdin.close()  # EOF: it commits what it holds (fenced if stale) and exits
        assert rogue.wait(T) == 0
        rogue_log.close()
    rows = wait_exactly(catalog, topic, delivered)
    # DuckDB reads the same table (every snapshot's files, from both writers) as pyiceberg
    assert _duckdb_rows(catalog, topic) == sorted(rows, key=lambda r: (r["partition"],
                                                                        r["offset"]))



ORDER = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"]}]}


def _avro(schema_id: int, value: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(ORDER), value)
    return b"\0" + schema_id.to_bytes(4, "big") + out.getvalue()


def test_value_schema_mode_decodes_values_into_columns(make_broker, unique_topic,
                                                       tmp_path) -> None:
    broker = make_broker({"iceberg.enable": "true", **_catalog(tmp_path),
                          "schema.registry.listeners": "http://127.0.0.1:0",
                          "schema.registry.topic.replication.factor": "1"})
    registry = started_url(broker, "schema registry")
    topic = unique_topic("typed")
    request = urllib.request.Request(
        f"{registry}/subjects/{topic}-value/versions", method="POST",
        data=json.dumps({"schema": json.dumps(ORDER)}).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(request, timeout=T) as answer:
        schema_id = json.loads(answer.read())["id"]
    kc.create_topic(broker.bootstrap, topic, 1, {"iceberg.mode": "value_schema",
                                                 "iceberg.commit.interval.ms": "300"})
    good = [kc.Msg(b"k", _avro(schema_id, {"id": i, "note": None if i % 2 else f"n{i}"}))
            for i in range(20)]
    delivered = kc.produce(broker.bootstrap, topic, [*good, kc.Msg(b"k", b"not avro"),
                                                     *good[:2]])
    catalog = SqlCatalog("strom", uri=f"sqlite:///{tmp_path}/catalog.db",
                         warehouse=(tmp_path / "warehouse").as_uri())
    deadline = time.monotonic() + T
    while True:  # the 20 good ones; the bad one and those after it wait, reported
        rows, offsets = table_rows(catalog, topic)
        if len(rows) == 20 and "does not decode" in broker.log_text():
            break
        assert len(rows) <= 20 and time.monotonic() < deadline, f"{len(rows)} rows"
        time.sleep(0.2)  # poll interval, not synchronisation
    assert offsets == {"0": delivered[20].offset}
    rows.sort(key=lambda r: r["offset"])
    assert [r["value"] for r in rows[:2]] == [{"id": 0, "note": "n0"}, {"id": 1, "note": None}]
    assert _duckdb_rows(catalog, topic) == rows  # the typed value column in DuckDB too

    # given a dead-letter topic, the value that does not decode goes there, with where it came
    # from and why, and the records after it reach the table (exactly once still)
    dlq = f"dlq.{topic}"
    kc.create_topic(broker.bootstrap, dlq, 1)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("errors.deadletterqueue.topic.name", dlq,
                    incremental_operation=AlterConfigOpType.SET)])
    admin = kc.admin(broker.bootstrap)  # (kept: librdkafka ends requests of a dropped handle)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(T)
    deadline = time.monotonic() + T
    while True:
        rows, offsets = table_rows(catalog, topic)
        if offsets == {"0": delivered[-1].offset + 1}:
            break
        assert time.monotonic() < deadline, f"offsets {offsets}"
        time.sleep(0.2)  # poll interval, not synchronisation
    assert sorted(r["offset"] for r in rows) == [m.offset for m in delivered
                                                 if m.value != b"not avro"]
    [letter] = kc.consume(broker.bootstrap, dlq, 1)
    assert (letter.key, letter.value) == (b"k", b"not avro")
    headers = dict(letter.headers)
    assert headers["__dlq.errors.topic"] == topic.encode()
    assert (headers["__dlq.errors.partition"], headers["__dlq.errors.offset"]) == \
        (b"0", str(delivered[20].offset).encode())
    assert b"does not decode" in (headers["__dlq.errors.message"] or b"")
    assert "went to the dead-letter topic" in broker.log_text()


def test_a_broker_with_an_ssl_listener_only(tmp_path) -> None:
    """No PLAINTEXT listener: the lake writer reads through the SSL one, trusting the key
    store's own certificate chain (no trust store is set)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from ..broker import HOST, BrokerProcess
    from ..security.certs import CertificateAuthority

    ca = CertificateAuthority(tmp_path / "ca")
    server = ca.issue("broker", server=True, O="Strom Tests", CN="localhost")
    chain = tmp_path / "chain.pem"  # key, certificate and the CA's: a key store with its chain
    chain.write_bytes(server.both.read_bytes() + ca.path.read_bytes())
    broker = BrokerProcess(tmp_path / "ssl-only", name="lake-ssl-only")
    tls = {"security.protocol": "SSL", "ssl.ca.location": str(ca.path)}
    try:
        broker.start({"listeners": f"SSL://{HOST}:{broker.port}", "metrics.listener": "",
                      "ssl.keystore.type": "PEM", "ssl.keystore.location": str(chain),
                      "iceberg.enable": "true", **_catalog(tmp_path)}, wait=False)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **tls})
        deadline = time.monotonic() + T
        while True:  # the harness's readiness probe speaks PLAINTEXT: poll over TLS here
            try:
                admin.list_topics(timeout=2)
                break
            except Exception:
                assert time.monotonic() < deadline and broker.running, broker.log_tail()
        admin.create_topics([NewTopic("sealed", 2, 1, config={
            "iceberg.mode": "key_value", "iceberg.commit.interval.ms": "300"})])["sealed"].result(T)
        delivered = kc.produce(broker.bootstrap, "sealed", messages(0, 20),
                               **{k.replace(".", "_"): v for k, v in tls.items()})
        catalog = SqlCatalog("strom", uri=f"sqlite:///{tmp_path}/catalog.db",
                             warehouse=(tmp_path / "warehouse").as_uri())
        wait_exactly(catalog, "sealed", delivered)
    finally:
        broker.stop()
