"""Iceberg topics through a REST catalog (issue 33): with iceberg.catalog.type=rest the lake
writer opens pyiceberg's RestCatalog at iceberg.catalog.uri. The server is Iceberg's own REST
handler and servlet over a JdbcCatalog on a SQLite file, run by our launcher on 127.0.0.1
(compat/iceberg_rest.py; its classpath fetched with Maven and the launcher compiled on first
use, cached under ~/.cache/strom-compat). The rows land exactly once, and the same table is
read through REST and, directly, through pyiceberg's SqlCatalog on the server's SQLite file: one
catalog reachable both ways. While the catalog is away, commits fail with ERROR lines and the
broker's metrics show the failures and the lag rising; once it is back, every record is in the
table once. A REST catalog without iceberg.catalog.uri is refused at start."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog

from .. import clients as kc
from ..broker import HOST, STROM_BIN, free_port
from .tables import T, messages, wait_exactly

_PATH = Path(__file__).resolve().parents[3] / "compat" / "iceberg_rest.py"
_spec = importlib.util.spec_from_file_location("compat_iceberg_rest", _PATH)
assert _spec is not None and _spec.loader is not None
iceberg_rest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(iceberg_rest)

# a first run fetches the classpath (about 80 MB) and compiles the launcher
pytestmark = [pytest.mark.timeout(iceberg_rest.dist.FETCH_TIMEOUT + iceberg_rest.COMPILE_TIMEOUT)
              if not iceberg_rest.is_cached() else pytest.mark.timeout(120)]

NAME = "lake"  # the server's catalog name: the JdbcCatalog's key in the SQLite file


@pytest.fixture
def rest_catalog(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A REST catalog server on 127.0.0.1 (any free port) over tmp_path/catalog.db."""
    try:
        iceberg_rest.check_tools()
    except RuntimeError as exc:  # under CI=true a skip fails (tests/conftest.py)
        pytest.skip(str(exc))
    db, warehouse = tmp_path / "catalog.db", (tmp_path / "warehouse").as_uri()
    url, proc = iceberg_rest.start_rest_catalog(db, warehouse, NAME)
    server = {"url": url, "db": db, "warehouse": warehouse, "proc": proc}
    try:
        yield server
    finally:
        iceberg_rest.stop_rest_catalog(server["proc"])


def _by_offset(rows: list[dict]) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    return {(r["partition"], r["offset"]): (r["key"], r["value"]) for r in rows}


def test_the_lake_writer_writes_through_a_rest_catalog(make_broker, unique_topic,
                                                       rest_catalog) -> None:
    broker = make_broker({"iceberg.enable": "true", "iceberg.catalog.type": "rest",
                          "iceberg.catalog.uri": rest_catalog["url"],
                          "metrics.listener": "http://127.0.0.1:0"})
    topic = unique_topic("lake")
    kc.create_topic(broker.bootstrap, topic, 2, {"iceberg.mode": "key_value",
                                                 "iceberg.commit.interval.ms": "300"})
    delivered = kc.produce(broker.bootstrap, topic, messages(0, 40))
    rest = RestCatalog(NAME, uri=rest_catalog["url"])
    wait_exactly(rest, topic, delivered)
    delivered += kc.produce(broker.bootstrap, topic, messages(40, 20))  # a second commit
    rows = wait_exactly(rest, topic, delivered)
    assert _by_offset(rows) == {(m.partition, m.offset): (m.key, m.value) for m in delivered}

    # the same catalog, read directly from the server's SQLite file
    sql = SqlCatalog(NAME, uri=f"sqlite:///{rest_catalog['db']}",
                     warehouse=rest_catalog["warehouse"])
    through_rest = rest.load_table(("strom", topic))
    direct = sql.load_table(("strom", topic))
    assert direct.metadata_location == through_rest.metadata_location
    assert _by_offset(direct.scan().to_arrow().to_pylist()) == _by_offset(rows)
    assert str(direct.spec().fields[0].transform) == "day"
    assert not (broker.data_dir / "iceberg").exists(), "no local SQL catalog besides"

    # the catalog goes away: commits fail, with ERROR lines; the broker's metrics show the
    # failures and the lag; once it is back, every record is in the table once
    iceberg_rest.stop_rest_catalog(rest_catalog["proc"])
    delivered += kc.produce(broker.bootstrap, topic, messages(60, 30))
    metrics = broker.started_url("metrics")

    def lake_metrics() -> dict[str, float]:
        with urllib.request.urlopen(metrics, timeout=T) as answer:
            text = answer.read().decode()
        return {m.group(1): float(m.group(2)) for m in re.finditer(
            rf'^(strom_lake_\w+)\{{topic="{re.escape(topic)}"\}} (\S+)$', text, re.M)}

    deadline = time.monotonic() + T
    while not (lake_metrics().get("strom_lake_commit_failures_total", 0) >= 1
               and lake_metrics().get("strom_lake_lag_records", 0) >= 30):
        assert time.monotonic() < deadline, lake_metrics()
        time.sleep(0.2)  # poll interval, not synchronisation
    assert "failed: they are read again" in broker.log_text() or \
        "still out of reach" in broker.log_text()
    port = int(rest_catalog["url"].rsplit(":", 1)[1])
    _, rest_catalog["proc"] = iceberg_rest.start_rest_catalog(
        rest_catalog["db"], rest_catalog["warehouse"], NAME, port=port)
    wait_exactly(rest, topic, delivered)
    deadline = time.monotonic() + T
    while lake_metrics().get("strom_lake_lag_records") != 0:
        assert time.monotonic() < deadline, lake_metrics()
        time.sleep(0.2)  # poll interval, not synchronisation


def test_a_rest_catalog_without_a_uri_is_refused_with_one_line(tmp_path: Path) -> None:
    # subprocess.run kills the broker if it outlives the timeout
    result = subprocess.run(
        [str(STROM_BIN), "broker", "--override", f"listeners=PLAINTEXT://{HOST}:{free_port()}",
         "--override", f"log.dirs={tmp_path / 'data'}", "--override", "iceberg.enable=true",
         "--override", "iceberg.catalog.type=rest"],
        capture_output=True, text=True, timeout=T, stdin=subprocess.DEVNULL, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode != 0
    assert result.stderr.splitlines()[-1] == (
        "strom broker: iceberg.catalog.type=rest needs iceberg.catalog.uri, the REST catalog's "
        "URL (e.g. http://127.0.0.1:8181)")
