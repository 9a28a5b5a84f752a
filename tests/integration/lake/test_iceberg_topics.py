"""Iceberg topics (issue 33 point 2): with iceberg.enable the broker runs a lake writer that
appends an iceberg.mode=key_value topic's records to the table <iceberg.namespace>.<topic>,
one row per record, exactly once across kill -9 of the broker and of the writer itself (each
snapshot's summary records the offsets it covers); a topic altered to key_value becomes a table
from its first record; one left disabled has none; a broker with an SSL listener only works too.
(value_schema mode: test_value_formats.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError

from strom.lake.settings import Handoff

from .. import clients as kc
from .tables import T, duckdb_rows, messages, wait_exactly


def _catalog(tmp_path: Path) -> dict[str, str]:
    return {"iceberg.catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
            "iceberg.catalog.warehouse": (tmp_path / "warehouse").as_uri()}


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
    assert duckdb_rows(catalog, topic) == sorted(rows, key=lambda r: (r["partition"],
                                                                        r["offset"]))



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
