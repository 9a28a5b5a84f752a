"""A full disk, end to end (issue 15, point 5): a real broker with its log dir on a small tmpfs.

Producing until the disk is full gives the producer KAFKA_STORAGE_ERROR (never a silent loss
or only a time-out), the broker logs one ERROR naming the dir and the cause (not one per
request), the dir is offline (topic creation fails with a clear error, fetches answer
KAFKA_STORAGE_ERROR); once space is freed the dir comes back by itself and every acknowledged
record is readable, nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .disks import tmpfs

TMPFS_SIZE = "8m"
FILLER_BYTES = 3 * 1024 * 1024  # freed to let the dir come back
VALUE_BYTES = 10_000
DEADLINE_S = 60.0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of TMPFS_SIZE mounted on a fresh dir, always unmounted at the end."""
    with tmpfs(tmp_path / "disk", TMPFS_SIZE) as mnt:
        yield mnt


def _error_lines(log_path: Path, since: int) -> list[str]:
    with open(log_path, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    return [line for line in text.splitlines() if "level=ERROR" in line]


def _produce(producer: Producer, topic: str, values: list[bytes]) -> list[tuple[bytes, object]]:
    """Send ``values``; (value, offset or KafkaError) for each, from the delivery reports."""
    reports: list[tuple[bytes, object]] = []

    def report(err, msg) -> None:
        reports.append((msg.value(), err if err is not None else msg.offset()))

    for v in values:
        while True:
            try:
                producer.produce(topic, v, callback=report)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0, "delivery reports missing"
    return reports


def _consume_all(bootstrap: str, topic: str, end: int) -> dict[int, bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "disk-full-check",
                         "enable.auto.commit": False, "fetch.message.max.bytes": 1 << 20})  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: dict[int, bytes] = {}
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < end:
            assert time.monotonic() < deadline, f"read {len(got)} of {end} records"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got[msg.offset()] = msg.value()
        return got
    finally:
        consumer.close()


@pytest.mark.legacy_single_node  # the metadata log shares the full log dir
def test_full_disk_goes_offline_with_one_error_and_comes_back(small_disk, make_broker):
    filler = small_disk / "filler"
    filler.write_bytes(b"\xff" * FILLER_BYTES)
    broker = make_broker({"log.segment.bytes": 1024 * 1024}, data_dir=small_disk / "data")
    bootstrap = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("fill", 1, 1)])["fill"].result(30)
    # no retries: librdkafka retries KAFKA_STORAGE_ERROR (retriable, as in Kafka) until
    # message.timeout.ms; here every delivery report shows what the broker answered
    producer = Producer({"bootstrap.servers": bootstrap, "retries": 0, "linger.ms": 5,
                         "enable.idempotence": False, "acks": "all"})  # fmt: skip
    log_mark = broker.log_size()

    acked: dict[int, bytes] = {}
    failures: list[KafkaError] = []
    n = 0
    while len(failures) < 50:  # fill, then keep producing to see the ERROR is not repeated
        assert n < 2000, "8 MB never filled up"
        values = [f"{i:08d}".encode() + b"x" * VALUE_BYTES for i in range(n, n + 50)]
        n += 50
        for value, result in _produce(producer, "fill", values):
            if isinstance(result, KafkaError):
                failures.append(result)
            else:
                acked[result] = value
    assert acked, "nothing was written before the disk was full"
    assert {f.code() for f in failures} == {KafkaError.KAFKA_STORAGE_ERROR}, failures[:3]

    errors = _error_lines(broker.log_path, log_mark)
    assert len(errors) == 1, "one ERROR, not one per request:\n" + "\n".join(errors[:5])
    assert "No space left on device" in errors[0] and str(small_disk / "data") in errors[0]

    # the metadata log is in the offline dir: creating a topic fails at once, clearly
    created = admin.create_topics([NewTopic("later", 1, 1)], request_timeout=30)["later"]
    with pytest.raises(KafkaException) as exc:
        created.result(30)
    assert exc.value.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR, exc.value

    filler.unlink()  # space returns: the broker notices by itself
    deadline = time.monotonic() + DEADLINE_S
    while True:
        assert time.monotonic() < deadline, "producing never worked again"
        [(value, result)] = _produce(producer, "fill", [b"after" + b"x" * VALUE_BYTES])
        if not isinstance(result, KafkaError):
            acked[result] = value
            break
        assert result.code() == KafkaError.KAFKA_STORAGE_ERROR, result
        time.sleep(0.2)  # poll interval, not synchronisation
    assert "is back online" in broker.log_text(log_mark)

    end = max(acked) + 1
    got = _consume_all(bootstrap, "fill", end)
    assert got == acked, "every acknowledged record is readable, and nothing else"
