"""The SSL row's pure parts: certificates, broker settings over SSL, the scenario's rows."""

from __future__ import annotations

import socket
import ssl
import struct
import sys
import threading
from pathlib import Path

import pytest

# bench/ lives at the repository root, outside the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench import kafka_peer as kafka
from bench.brokers import (
    BrokerError,
    BrokerProcess,
    api_versions_ok,
    strom_settings,
    strom_spec,
    tansu_spec,
)
from bench.client import reach
from bench.config import FULL, QUICK
from bench.scenarios import ALL, BY_NAME
from bench.scenarios.base import Context
from bench.tls import files_in, make_certificates, sitting_certificates


def _parse(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def _serve_once(server: ssl.SSLContext, answer: bytes) -> tuple[int, threading.Thread]:
    """A one-connection TLS server on 127.0.0.1: reads one request frame, sends ``answer``."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            try:
                with server.wrap_socket(conn, server_side=True) as tls:
                    size = struct.unpack(">i", tls.recv(4))[0]
                    while size > 0:
                        size -= len(tls.recv(size))
                    tls.sendall(answer)
            except (OSError, struct.error):
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


def _server_context(keystore: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(keystore)  # key then certificate in one file, as the brokers read it
    return ctx


def test_certificates_make_a_key_store_a_client_of_127_0_0_1_trusts(tmp_path: Path) -> None:
    files = make_certificates(tmp_path / "tls")
    assert files == files_in(tmp_path / "tls") and files.exist()
    store = files.keystore.read_text()
    assert store.startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8, unencrypted
    assert store == files.key.read_text() + files.cert.read_text()
    # ApiVersions v0 answer: correlation id 1, no error, no versions.
    answer = struct.pack(">iihi", 10, 1, 0, 0)
    port, thread = _serve_once(_server_context(files.keystore), answer)
    assert api_versions_ok(port, timeout=5, tls=files.client_context())
    thread.join(5)


def test_a_probe_that_does_not_trust_the_certificate_is_not_ready(tmp_path: Path) -> None:
    files = make_certificates(tmp_path / "a")
    other = make_certificates(tmp_path / "b")  # another CA
    port, thread = _serve_once(_server_context(files.keystore), struct.pack(">iihi", 10, 1, 0, 0))
    assert not api_versions_ok(port, timeout=5, tls=other.client_context())
    thread.join(5)


def test_a_sitting_makes_its_certificates_once(tmp_path: Path) -> None:
    first = sitting_certificates(tmp_path)
    ca = first.ca.read_bytes()
    assert first.ca.parent == tmp_path / "tls"
    assert sitting_certificates(tmp_path) == first
    assert first.ca.read_bytes() == ca


def test_client_settings_over_ssl(tmp_path: Path) -> None:
    files = files_in(tmp_path)
    assert files.client_config() == {"security.protocol": "SSL", "ssl.ca.location": str(files.ca)}
    job = {"bootstrap": "127.0.0.1:1", "security": files.client_config()}
    assert reach(job) == {"bootstrap.servers": "127.0.0.1:1", **files.client_config()}
    assert reach({"bootstrap": "127.0.0.1:1"}) == {"bootstrap.servers": "127.0.0.1:1"}


def test_strom_listens_on_ssl_alone_from_a_pem_key_store(tmp_path: Path) -> None:
    data = Path("/d")
    plain = strom_settings(9092, data)
    assert plain[0] == "listeners=PLAINTEXT://127.0.0.1:9092"
    assert not any(item.startswith("ssl.") for item in plain)
    files = files_in(tmp_path)
    over_ssl = strom_settings(9092, data, files)
    assert over_ssl[:3] == [
        "listeners=SSL://127.0.0.1:9092",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={files.keystore}",
    ]
    assert over_ssl[3:] == plain[1:]  # log.dirs and metrics as on PLAINTEXT
    argv = strom_spec("strom", overrides=["a=b"]).command(9092, data, tls=files)
    items = argv[3::2]
    assert argv[:2] == ["strom", "broker"] and set(argv[2::2]) == {"--override"}
    assert items == [*over_ssl, "a=b"]  # --strom-override still wins
    assert strom_spec("strom").command(9092, data)[3::2] == plain


def test_kafka_over_ssl_keeps_plaintext_for_the_inter_broker_listener(tmp_path: Path) -> None:
    files = files_in(tmp_path)
    props = _parse(
        kafka.server_properties(9092, 9093, Path("/d/logs"), tls=files, plaintext_port=9094)
    )
    listeners = "SSL://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093"
    per_run = {
        "node.id": "1",
        "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
        "listeners": listeners,
        "advertised.listeners": listeners,
        "log.dirs": "/d/logs",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(files.keystore),
    }
    assert props == {**kafka.SHIPPED_DEFAULTS, **per_run}
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert "SSL:SSL" in props["listener.security.protocol.map"].split(",")
    assert "ssl.key.password" not in props and "ssl.keystore.password" not in props
    with pytest.raises(ValueError):
        kafka.server_properties(9092, 9093, Path("/d/logs"), tls=files)
    plain = _parse(kafka.server_properties(9092, 9093, Path("/d/logs")))
    assert not any(k.startswith("ssl.") for k in plain)


def test_tansu_has_no_tls_listener(tmp_path: Path) -> None:
    spec = tansu_spec("tansu")
    assert spec.no_tls and "no TLS listener" in spec.no_tls
    assert strom_spec("strom").no_tls is None
    files = files_in(tmp_path)
    with pytest.raises(BrokerError):
        spec.command(9092, tmp_path, tls=files)
    with pytest.raises(BrokerError):
        BrokerProcess(spec, tmp_path, tls=files)
    assert spec.command(9092, tmp_path)[2:4] == ["--listener-url", "tcp://127.0.0.1:9092"]


def test_the_ssl_scenario_is_produce_1k_over_ssl_with_its_goals_against_kafka() -> None:
    names = [s.name for s in ALL]
    assert names.index("produce-1k-ssl") == names.index("produce-1k-acks-0") + 1
    ssl_run, plain = BY_NAME["produce-1k-ssl"], BY_NAME["produce-1k"]
    for sizes in (FULL, QUICK):
        assert ssl_run.count(sizes) == plain.count(sizes)  # type: ignore[attr-defined]
        ssl_rows, plain_rows = ssl_run.rows(sizes), plain.rows(sizes)
        assert [m.key for m in ssl_rows.metrics] == [m.key for m in plain_rows.metrics]
        assert {m.key for m in ssl_rows.metrics} >= {
            "produce_mbs", "produce_rpcpu", "consume_mbs", "consume_rpcpu", "rss_mb"
        }  # fmt: skip
        judged = [m.key for m in ssl_rows.metrics if m.target]
        assert judged == [m.key for m in plain_rows.metrics if m.target]
        assert all(t.peer != "Tansu" for m in ssl_rows.metrics for t in m.targets)
        assert "over SSL" in ssl_rows.title and "over SSL" not in plain_rows.title
    assert (ssl_run.size, ssl_run.acks) == (plain.size, plain.acks)  # type: ignore[attr-defined]


def test_the_ssl_scenario_is_n_a_on_tansu_without_starting_it(tmp_path: Path) -> None:
    ctx = Context(sizes=QUICK, workdir=tmp_path, log=lambda _m: None)
    out = BY_NAME["produce-1k-ssl"].run(tansu_spec("/nonexistent/tansu"), ctx)
    assert out.failed is None and not out.metrics
    keys = [m.key for m in BY_NAME["produce-1k-ssl"].rows(QUICK).metrics]
    assert sorted(out.na) == sorted(keys)
    assert all("no TLS listener" in why for why in out.na.values())
    assert list(tmp_path.iterdir()) == []  # no certificates, no data directory


def test_the_report_of_an_ssl_run_says_how_and_shows_tansu_as_n_a(tmp_path: Path) -> None:
    import datetime as dt

    from bench import chart, run
    from bench.brokers import BrokerSpec
    from bench.report import Outcome
    from bench.runner import Results

    scenarios = [BY_NAME["produce-1k"], BY_NAME["produce-1k-ssl"]]
    ctx = Context(sizes=FULL, workdir=tmp_path, log=lambda _m: None)
    tansu, results = tansu_spec("tansu", version="tansu 0.6.0"), Results(seconds=60.0)
    kafka_like = BrokerSpec(
        label="Kafka",
        kind="kafka",
        command=lambda port, data, tls=None: ["java", "kafka.Kafka"],
        persistent=True,
        version="kafka 4.4.0",
        notes="disk storage, JVM heap 1 GiB",
        ready_marker=None,
    )
    for sc in scenarios:
        keys = [m.key for m in sc.rows(FULL).metrics]
        for r in range(3):
            results.add(sc.name, "Strom", Outcome({k: 200 + 2 * r for k in keys}))
            results.add(sc.name, "Kafka", Outcome({k: 100 + r for k in keys}))
            if sc.name.endswith("-ssl"):
                results.add(sc.name, "Tansu", sc.run(tansu, ctx))
            else:
                results.add(sc.name, "Tansu", Outcome({k: 50 + r for k in keys}))
    text = run.compose(
        scenarios,
        results,
        strom_spec("strom"),
        [tansu, kafka_like],
        FULL,
        3,
        dt.datetime(2026, 11, 27, 22, 0),
        ("1.00 1.00 1.00", "1.00 1.00 1.00"),
        "python -m bench --scenarios produce-1k,produce-1k-ssl",
    )
    assert "- Over SSL (produce-1k-ssl): the clients' listener is SSL" in text
    ssl_rows = text.split("over SSL, 6 partitions")[1].splitlines()[:5]
    assert [r.split(" | ")[3] for r in ssl_rows] == ["n/a"] * 5  # Tansu's column
    assert [r.split(" | ")[6] for r in ssl_rows] == ["2.00x"] * 5  # Strom/Kafka
    assert "Tansu 0.6.0 has no TLS listener" in ssl_rows[0]
    assert [r.split(" | ")[7] for r in ssl_rows[:4]] == [">= 1x Kafka"] * 4  # none against Tansu
    assert "FAIL" not in " ".join(ssl_rows[:4])
    title = chart.title_from_report(text)
    live = chart.from_results(
        run._table(scenarios, FULL), results.runs, "Strom", ["Tansu", "Kafka"], title
    )
    assert chart.from_markdown(text) == live
    assert "1 KiB over SSL acks=1" in {chart.short_scenario(e.scenario) for e in live.entries}

    no_ssl = run.compose(
        scenarios[:1], results, strom_spec("strom"), [tansu, kafka_like], FULL, 3,
        dt.datetime(2026, 11, 27, 22, 0), ("1", "1"), "python -m bench",
    )  # fmt: skip
    assert "Over SSL" not in no_ssl
