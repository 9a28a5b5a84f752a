"""The source's native reader (strom.spark.fetcher) against a real broker, read for read against
the librdkafka reader on the same ranges: compression codecs, headers, null keys and values,
transactions (committed and aborted, both isolation levels), data loss, a broker restart in the
middle of a read, SASL over TLS. No Spark: the readers run in this process, as in a Python
worker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from strom.spark.consumer import ReadSettings, read_range
from strom.spark.fetcher import ReadRefused, close_sessions
from strom.spark.offsets import OffsetRange
from strom.spark.options import DataLossError, native_reader_unsupported

from ..broker import HOST, free_port
from .conftest import create_topic, wait_for

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture(autouse=True)
def _fresh_sessions() -> Iterator[None]:
    yield
    close_sessions()


def _settings(bootstrap: str, native: bool, **params: str) -> ReadSettings:
    return ReadSettings(params=tuple(sorted({"bootstrap.servers": bootstrap, **params}.items())),
                        group_id="fetcher-test", include_headers=True, native=native,
                        poll_timeout_ms=20_000, batch_rows=7)


def _read(r: OffsetRange, settings: ReadSettings) -> list[dict[str, Any]]:
    batches = list(read_range(r, settings))
    assert all(b.num_rows <= settings.batch_rows for b in batches)
    return pa.Table.from_batches(batches).to_pylist() if batches else []


def _fill(bootstrap: str, topic: str) -> int:
    """Every codec, headers, null keys and values, then a committed and an aborted
    transaction interleaved with plain records; returns the partition's end."""
    for i, codec in enumerate(CODECS):
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                      "linger.ms": 20})
        for j in range(30):
            p.produce(topic, None if j % 7 == 3 else b"v-%s-%d" % (codec.encode(), j),
                      key=None if j % 5 == 0 else b"k%d" % j, partition=0,
                      headers=[("h", b"x"), ("n", None)] if j % 3 == 0 else None,
                      timestamp=1_700_000_000_000 + 1000 * i + j)
        assert p.flush(30) == 0
    for commit in (True, False, True):
        t = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-{commit}",
                      "compression.type": "lz4"})
        t.init_transactions(30)
        t.begin_transaction()
        for j in range(10):
            t.produce(topic, b"txn-%s-%d" % (str(commit).encode(), j), partition=0)
        assert t.flush(30) == 0  # (an abort purges what is not sent yet)
        (t.commit_transaction if commit else t.abort_transaction)(30)
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, b"last", partition=0)
    assert p.flush(30) == 0
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        c.close()


def test_native_reads_what_librdkafka_reads(strom_broker, unique_topic) -> None:
    bs = strom_broker.bootstrap
    topic = unique_topic("fetch")
    create_topic(bs, topic)
    end = _fill(bs, topic)
    for isolation in ("read_uncommitted", "read_committed"):
        native = _settings(bs, True, **{"isolation.level": isolation})
        librdkafka = _settings(bs, False, **{"isolation.level": isolation})
        for start, stop in ((0, end), (17, 64), (140, end), (end - 1, end)):
            r = OffsetRange(topic, 0, start, stop)
            got = _read(r, native)
            assert got == _read(r, librdkafka), (isolation, start, stop)
            assert all(start <= row["offset"] < stop for row in got)
        values = [row["value"] for row in _read(OffsetRange(topic, 0, 0, end), native)]
        aborted = [v for v in values if v and v.startswith(b"txn-False")]
        assert len(aborted) == (10 if isolation == "read_uncommitted" else 0)
        assert values.count(None) == 5 * 4 and b"last" in values


def test_data_loss_is_reported_as_on_the_librdkafka_path(strom_broker, unique_topic) -> None:
    from confluent_kafka import TopicPartition

    bs = strom_broker.bootstrap
    topic = unique_topic("loss")
    create_topic(bs, topic)
    p = Producer({"bootstrap.servers": bs})
    for j in range(20):
        p.produce(topic, b"%d" % j, partition=0)
    assert p.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.delete_records([TopicPartition(topic, 0, 8)]).values():
        f.result(30)
    r = OffsetRange(topic, 0, 0, 20)
    with pytest.raises(DataLossError, match=r"\[0, 8\)"):
        _read(r, _settings(bs, True))
    lenient = ReadSettings(params=(("bootstrap.servers", bs),), group_id="g",
                           fail_on_data_loss=False, native=True)
    assert [row["offset"] for row in _read(r, lenient)] == list(range(8, 20))
    # a range that now ends past the partition's end (the topic was re-created smaller)
    # (after a grace of half the poll timeout: a new leader's high watermark can lag a moment)
    short = ReadSettings(params=(("bootstrap.servers", bs),), group_id="g", native=True,
                         poll_timeout_ms=2000)
    with pytest.raises(DataLossError, match="ends at offset 20"):
        _read(OffsetRange(topic, 0, 15, 30), short)
    admin.delete_topics([topic])[topic].result(30)
    wait_for(lambda: topic not in admin.list_topics(timeout=10).topics, "topic deleted")
    with pytest.raises(DataLossError, match="gone"):
        _read(OffsetRange(topic, 0, 0, 20), _settings(bs, True))


def test_a_read_survives_a_broker_restart(make_broker, unique_topic) -> None:
    broker = make_broker()
    bs = broker.bootstrap
    topic = unique_topic("restart")
    create_topic(bs, topic)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for j in range(3000):
        p.produce(topic, b"v%d" % j, partition=0)
        if j % 100 == 99:  # batches of 100: the read needs many fetches, some after the restart
            assert p.flush(30) == 0
    settings = ReadSettings(params=(("bootstrap.servers", bs),
                                    ("max.partition.fetch.bytes", "4096")),
                            group_id="g", native=True, batch_rows=100)
    reader = read_range(OffsetRange(topic, 0, 0, 3000), settings)
    first = next(reader)
    broker.restart()
    rest = list(reader)
    offsets = [o for b in [first, *rest] for o in b.column("offset").to_pylist()]
    assert offsets == list(range(3000))


def test_sasl_over_tls(make_broker, unique_topic, tmp_path: Path) -> None:
    from ..security.certs import CertificateAuthority

    ca = CertificateAuthority(tmp_path / "ca")
    server = ca.issue("broker", server=True, O="Strom Tests", CN="localhost")
    chain = tmp_path / "chain.pem"
    chain.write_bytes(server.both.read_bytes() + ca.path.read_bytes())
    port = free_port()
    broker = make_broker({
        "listeners": f"PLAINTEXT://{HOST}:{{port}},SASL_SSL://{HOST}:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required '
            'user_alice="alice-secret";',
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(chain),
    })
    topic = unique_topic("sasl")
    create_topic(broker.bootstrap, topic)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for j in range(50):
        p.produce(topic, b"s%d" % j, partition=0)
    assert p.flush(30) == 0

    def secure(password: str) -> dict[str, str]:
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                                    f'required username="alice" password="{password}";',
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca.path)}

    assert native_reader_unsupported(secure("x")) is None
    r = OffsetRange(topic, 0, 0, 50)
    rows = _read(r, _settings(f"{HOST}:{port}", True, **secure("alice-secret")))
    assert [row["value"] for row in rows] == [b"s%d" % j for j in range(50)]
    with pytest.raises(ReadRefused, match="authenticat"):
        _read(r, _settings(f"{HOST}:{port}", True, **secure("wrong")))
