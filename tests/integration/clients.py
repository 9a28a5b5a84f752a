"""Thin helpers over the real Kafka clients, bounded in time and strict about errors."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec


@dataclass
class Msg:
    """A record as a test compares it: bytes in, the same bytes out."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int | None = None
    partition: int | None = None
    offset: int | None = None

    def content(self) -> tuple:
        return (self.key, self.value, list(self.headers))


def contents(msgs: Iterable[Msg]) -> list[tuple]:
    return [m.content() for m in msgs]


def read_partition(bootstrap: str, topic: str, partition: int = 0, *,
                   isolation: str = "read_uncommitted", timeout: float = 30.0) -> list[Msg]:
    """Every record of one partition, from offset 0 until partition EOF (no group, no commits)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"strom-it-{uuid.uuid4().hex[:8]}",
                  "enable.partition.eof": True, "enable.auto.commit": False,
                  "isolation.level": isolation, "fetch.wait.max.ms": 100})  # fmt: skip
    out: list[Msg] = []
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(m.error())
            out.append(Msg(m.key(), m.value(), partition=m.partition(), offset=m.offset()))
        raise AssertionError(f"no partition EOF after {timeout}s ({len(out)} messages)")
    finally:
        c.close()


def sample_messages(tag: str = "", null_header: bool = True) -> list[Msg]:
    """Keys, headers, null and empty keys/values, binary and UTF-8 payloads."""
    t = tag.encode()
    msgs = [
        Msg(b"key-1" + t, b"value-1" + t, [("h1", b"one"), ("h2", b"two")]),
        Msg(None, b"no key" + t),
        Msg(b"null-value" + t, None),
        Msg(b"empty-value" + t, b""),
        Msg(b"", b"empty key" + t),
        Msg(b"dup-headers" + t, b"v", [("h", b"a"), ("h", b"b"), ("h", b"")]),
        Msg(b"null-header" + t, b"v", [("nothing", None)]),
        Msg(bytes(range(256)), bytes(reversed(range(256))) * 4, [("bin", bytes(range(256)))]),
        Msg("ключ".encode(), "значение ✓".encode() + t, [("ünï", "çødé".encode())]),
        Msg(b"big" + t, b"0123456789abcdef" * 4096),
    ]
    if not null_header:  # kafka-python cannot send a null header value
        msgs = [m for m in msgs if all(v is not None for _, v in m.headers)]
    return msgs


# --------------------------------------------------------------------------- admin


def admin(bootstrap: str, **conf: object) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **conf})


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    config: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> None:
    """Create a topic and wait until every partition has a leader in metadata."""
    a = admin(bootstrap)  # keep the handle alive until the future resolves
    futures = a.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    futures[name].result(timeout)
    wait_for_topic(bootstrap, name, partitions, timeout)


def wait_for_topic(bootstrap: str, name: str, partitions: int, timeout: float = 30.0) -> None:
    a = admin(bootstrap)
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        md = a.list_topics(name, timeout=5)
        t = md.topics.get(name)
        last = t
        if (
            t is not None
            and t.error is None
            and len(t.partitions) == partitions
            and all(p.leader >= 0 and p.error is None for p in t.partitions.values())
        ):
            return
        time.sleep(0.05)
    raise AssertionError(f"topic {name} not ready with {partitions} partitions: {last}")


def list_offset(
    bootstrap: str, topic: str, partition: int, spec: OffsetSpec, timeout: float = 20.0
):
    """ListOffsetsResultInfo (``.offset``, ``.timestamp``) for one partition."""
    tp = TopicPartition(topic, partition)
    a = admin(bootstrap)  # keep the handle alive until the future resolves
    futures = a.list_offsets({tp: spec}, request_timeout=timeout)
    return futures[tp].result(timeout)


def earliest(bootstrap: str, topic: str, partition: int = 0) -> int:
    return list_offset(bootstrap, topic, partition, OffsetSpec.earliest()).offset


def latest(bootstrap: str, topic: str, partition: int = 0) -> int:
    return list_offset(bootstrap, topic, partition, OffsetSpec.latest()).offset


def topic_id(bootstrap: str, topic: str, timeout: float = 30.0) -> str:
    from confluent_kafka import TopicCollection

    a = admin(bootstrap)
    desc = a.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic].result(
        timeout
    )
    return str(desc.topic_id)


def topic_names(bootstrap: str) -> set[str]:
    return set(admin(bootstrap).list_topics(timeout=10).topics)


# --------------------------------------------------------------------------- confluent-kafka


def producer(bootstrap: str, **conf: object) -> Producer:
    base = {"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 30000}
    base.update({k.replace("_", "."): v for k, v in conf.items()})
    return Producer(base)


def produce(
    bootstrap: str,
    topic: str,
    msgs: Sequence[Msg],
    *,
    partition: int | None = None,
    flush_each: bool = False,
    timeout: float = 30.0,
    **conf: object,
) -> list[Msg]:
    """Produce and return the delivered messages (partition/offset filled); raise on any error."""
    p = producer(bootstrap, **conf)
    delivered: list[Msg | None] = [None] * len(msgs)
    errors: list[KafkaError] = []

    def on_delivery(i: int):
        def cb(err, msg):
            if err is not None:
                errors.append(err)
                return
            m = msgs[i]
            ts = msg.timestamp()[1]
            delivered[i] = Msg(m.key, m.value, m.headers, ts, msg.partition(), msg.offset())

        return cb

    for i, m in enumerate(msgs):
        kwargs: dict = {"value": m.value, "key": m.key, "on_delivery": on_delivery(i)}
        if m.headers:
            kwargs["headers"] = list(m.headers)
        if m.timestamp is not None:
            kwargs["timestamp"] = m.timestamp
        part = m.partition if m.partition is not None else partition
        if part is not None:
            kwargs["partition"] = part
        p.produce(topic, **kwargs)
        if flush_each:
            p.flush(timeout)
    left = p.flush(timeout)
    if errors:
        raise KafkaException(errors[0])
    assert left == 0, f"{left} messages still queued after {timeout}s"
    assert all(d is not None for d in delivered)
    return delivered  # type: ignore[return-value]


def produce_with(p: Producer, topic: str, value: bytes, partition: int = 0, timeout: float = 10.0):
    """Produce one message with an existing producer and wait for its successful delivery."""
    result: list = []
    p.produce(
        topic, value=value, partition=partition, on_delivery=lambda e, m: result.append((e, m))
    )
    assert p.flush(timeout) == 0 and result, "no delivery report"
    err, msg = result[0]
    if err is not None:
        raise KafkaException(err)
    return msg


def produce_expect_error(
    bootstrap: str, topic: str, msg: Msg, timeout: float = 30.0, **conf: object
) -> KafkaError:
    """Produce one message that must fail; return the delivery error."""
    p = producer(bootstrap, **conf)
    result: list = []
    p.produce(topic, value=msg.value, key=msg.key, on_delivery=lambda err, m: result.append(err))
    assert p.flush(timeout) == 0, "delivery report never came"
    assert result and result[0] is not None, "produce unexpectedly succeeded"
    return result[0]


def consumer(bootstrap: str, **conf: object) -> Consumer:
    base = {
        "bootstrap.servers": bootstrap,
        # librdkafka insists on a group id; assign() with explicit offsets never uses the group.
        "group.id": f"strom-it-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
    }
    base.update({k.replace("_", "."): v for k, v in conf.items()})
    return Consumer(base)


def _to_msg(m) -> Msg:
    return Msg(
        m.key(), m.value(), list(m.headers() or []), m.timestamp()[1], m.partition(), m.offset()
    )


def poll_messages(c: Consumer, count: int, timeout: float = 30.0) -> list[Msg]:
    """Poll an assigned consumer until ``count`` messages arrived; fail on errors or the deadline."""
    out: list[Msg] = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"got {len(out)} of {count} messages in {timeout}s: {out[-3:]}")
        for m in c.consume(num_messages=count - len(out), timeout=min(left, 0.5)):
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(m.error())
            out.append(_to_msg(m))
    return out


def consume(
    bootstrap: str,
    topic: str,
    count: int,
    *,
    partition: int = 0,
    offset: int = 0,
    timeout: float = 30.0,
    **conf: object,
) -> list[Msg]:
    """Read exactly ``count`` messages of one partition from ``offset`` (assign, no group)."""
    c = consumer(bootstrap, **conf)
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        return poll_messages(c, count, timeout)
    finally:
        c.close()


def assert_no_more(c: Consumer, wait: float = 1.0) -> None:
    """Nothing else arrives within ``wait`` seconds (only for 'nothing extra' checks)."""
    deadline = time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        for m in c.consume(num_messages=100, timeout=left):
            if m.error() and m.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"unexpected extra message: {m.error() or _to_msg(m)}")


# --------------------------------------------------------------------------- kafka-python


def kp_produce(
    bootstrap: str, topic: str, msgs: Sequence[Msg], *, partition: int = 0, **conf: object
) -> list[Msg]:
    """Produce with kafka-python (idempotent unless ``acks`` is given); return delivered messages."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=30000, **conf)
    try:
        futures = [
            p.send(topic, value=m.value, key=m.key, headers=list(m.headers), partition=partition,
                   timestamp_ms=m.timestamp)
            for m in msgs
        ]  # fmt: skip
        p.flush(timeout=30)
        out = []
        for m, f in zip(msgs, futures, strict=True):
            md = f.get(timeout=30)
            out.append(Msg(m.key, m.value, m.headers, md.timestamp, md.partition, md.offset))
        return out
    finally:
        p.close(timeout=10)


def kp_consume(
    bootstrap: str, topic: str, count: int, *, partition: int = 0, offset: int = 0,
    timeout: float = 30.0, **conf: object,
) -> list[Msg]:  # fmt: skip
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    c = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_wait_ms=100, **conf,
    )  # fmt: skip
    try:
        tp = KTP(topic, partition)
        c.assign([tp])
        c.seek(tp, offset)
        out: list[Msg] = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"kafka-python got {len(out)} of {count} in {timeout}s")
            for recs in c.poll(timeout_ms=500, max_records=count - len(out)).values():
                out += [
                    Msg(r.key, r.value, list(r.headers), r.timestamp, r.partition, r.offset)
                    for r in recs
                ]
        return out
    finally:
        c.close(autocommit=False)


# --------------------------------------------------------------------------- aiokafka


async def aio_produce(
    bootstrap: str, topic: str, msgs: Sequence[Msg], *, partition: int = 0, **conf: object
) -> list[Msg]:
    import asyncio

    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=30000, **conf)
    await p.start()
    try:
        futures = [
            await p.send(topic, value=m.value, key=m.key, partition=partition,
                         timestamp_ms=m.timestamp, headers=list(m.headers))
            for m in msgs
        ]  # fmt: skip
        mds = await asyncio.wait_for(asyncio.gather(*futures), 30)
        return [
            Msg(m.key, m.value, m.headers, md.timestamp, md.partition, md.offset)
            if md is not None  # acks=0 learns nothing
            else Msg(m.key, m.value, m.headers)
            for m, md in zip(msgs, mds, strict=True)
        ]
    finally:
        await p.stop()


async def aio_consume(
    bootstrap: str, topic: str, count: int, *, partition: int = 0, offset: int = 0,
    timeout: float = 30.0, **conf: object,
) -> list[Msg]:  # fmt: skip
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    c = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_wait_ms=100, **conf,
    )  # fmt: skip
    await c.start()
    try:
        tp = ATP(topic, partition)
        c.assign([tp])
        c.seek(tp, offset)
        out: list[Msg] = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"aiokafka got {len(out)} of {count} in {timeout}s")
            batches = await c.getmany(tp, timeout_ms=500, max_records=count - len(out))
            for recs in batches.values():
                out += [
                    Msg(r.key, r.value, [tuple(h) for h in r.headers], r.timestamp,
                        r.partition, r.offset)
                    for r in recs
                ]  # fmt: skip
        return out
    finally:
        await c.stop()


# --------------------------------------------------------------------------- isolation


def held_consumer_child(pipe, bootstrap: str, topic: str, first: int, then: int) -> None:
    """Child-process body: read ``first`` records, report, wait for 'go', read ``then`` more.

    Runs in its own process so that a client crash (librdkafka has segfaulted on odd broker answers
    to a deleted topic) fails one test instead of the whole run.
    """
    c = consumer(bootstrap, **{"topic.metadata.refresh.interval.ms": 500})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        pipe.send([m.value for m in poll_messages(c, first)])
        assert pipe.recv() == "go"
        try:
            got = poll_messages(c, then, timeout=45)
            assert_no_more(c, 0.5)
            pipe.send([m.value for m in got])
        except Exception as e:  # report, don't hang the parent
            pipe.send(f"error: {e!r}")
    finally:
        c.close()


class HeldConsumer:
    """Parent side of :func:`held_consumer_child`."""

    def __init__(self, bootstrap: str, topic: str, first: int, then: int) -> None:
        import multiprocessing
        import sys
        from pathlib import Path

        # pytest imports this package without putting its parent on sys.path; the spawned child
        # needs it to unpickle the target, and inherits the parent's sys.path.
        tests_dir = str(Path(__file__).resolve().parent.parent)
        if tests_dir not in sys.path:
            sys.path.append(tests_dir)
        ctx = multiprocessing.get_context("spawn")
        self.pipe, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=held_consumer_child, args=(child, bootstrap, topic, first, then), daemon=True
        )
        self.proc.start()

    def receive(self, timeout: float = 60.0):
        if not self.pipe.poll(timeout):
            raise AssertionError(
                f"held consumer silent for {timeout}s (exit code {self.proc.exitcode})"
            )
        try:
            return self.pipe.recv()
        except EOFError:
            self.proc.join(10)
            raise AssertionError(f"held consumer died (exit code {self.proc.exitcode})") from None

    def go(self) -> None:
        self.pipe.send("go")

    def close(self) -> None:
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(10)
