"""Tools of the fault tests: a producer of numbered records that remembers what was acknowledged,
a reader of every record back, and a record-by-record reader of a replica's log files.

The checks follow the issue: every acknowledged record is read back exactly once and in order per
partition, and all replicas of a partition hold identical data.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from strom.record import decode_records, iter_batches


class NumberedProducer:
    """Writes values ``<partition>:<n>`` with n counting up per partition, from a thread, with
    acks=all and idempotence; ``acked[p]`` lists the numbers the broker acknowledged."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, *, rate_per_s: int = 400,
                 extra: dict | None = None) -> None:
        self.topic = topic
        self.partitions = partitions
        self.rate_per_s = rate_per_s
        conf = {
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": 120_000, "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000, "reconnect.backoff.max.ms": 1000,
        }
        conf.update(extra or {})
        self._producer = Producer(conf)
        self.acked: dict[int, list[int]] = defaultdict(list)
        self.failed: list[tuple[int, int, str]] = []
        self.fatal: str | None = None
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err, msg) -> None:
        p, n = (int(x) for x in msg.value().decode().split(":"))
        if err is None:
            self.acked[p].append(n)
        else:
            self.failed.append((p, n, str(err)))
            if err.fatal():
                self.fatal = str(err)

    def _run(self) -> None:
        counters = [0] * self.partitions
        interval = 1.0 / self.rate_per_s
        next_at = time.monotonic()
        while not self._stop.is_set() and self.fatal is None:
            p = self.sent % self.partitions
            value = f"{p}:{counters[p]}".encode()
            try:
                self._producer.produce(self.topic, value=value, partition=p,
                                       on_delivery=self._on_delivery)
            except BufferError:
                self._producer.poll(0.05)
                continue
            counters[p] += 1
            self.sent += 1
            self._producer.poll(0)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)

    def start(self) -> None:
        self._thread.start()

    def stop(self, flush_timeout: float = 120.0) -> int:
        """Stop producing and wait for every outstanding delivery report; returns how many
        are still unanswered (0 is expected)."""
        self._stop.set()
        self._thread.join(timeout=10)
        return self._producer.flush(flush_timeout)

    def total_acked(self) -> int:
        return sum(len(v) for v in self.acked.values())


def read_all(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0,
             isolation: str = "read_uncommitted") -> dict[int, list[int]]:
    """Every record's number, per partition, from the beginning up to the current end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{time.time_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": isolation, "enable.partition.eof": True})
    try:
        ends = {}
        deadline = time.monotonic() + timeout_s
        for p in range(partitions):
            while True:
                try:
                    _, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
                    ends[p] = hi
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: dict[int, list[int]] = defaultdict(list)
        positions = dict.fromkeys(range(partitions), 0)
        while any(positions[p] < ends[p] for p in range(partitions)):
            if time.monotonic() > deadline:
                raise AssertionError(f"read back stalled at {positions} of {ends}")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consume error: {msg.error()}")
            p, n = (int(x) for x in msg.value().decode().split(":"))
            assert p == msg.partition()
            got[p].append(n)
            positions[p] = msg.offset() + 1
        return got
    finally:
        consumer.close()


def wait_for(predicate, timeout: float, what: str):
    """Poll ``predicate`` until it returns something truthy (returned), or fail at the deadline.
    Exceptions count as "not yet": brokers answer errors in the middle of a failover."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as exc:
            last = exc
        time.sleep(0.2)  # poll interval, not synchronisation
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def check_exactly_once_in_order(acked: dict[int, list[int]], got: dict[int, list[int]]) -> None:
    """Acknowledged records all present, none twice, in order. Unacknowledged ones may be present
    (their acks were lost), but they too appear at most once and in order."""
    for p, numbers in got.items():
        assert len(numbers) == len(set(numbers)), f"partition {p} has duplicates"
        assert numbers == sorted(numbers), f"partition {p} is out of order"
    for p, numbers in acked.items():
        present = set(got.get(p, []))
        lost = [n for n in numbers if n not in present]
        assert not lost, f"partition {p} lost {len(lost)} acknowledged records, e.g. {lost[:10]}"


def replica_records(partition_dir: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every data record in a replica's log files, in offset order."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    for seg in sorted(partition_dir.glob("*.log")):
        data = seg.read_bytes()
        for pos, h in iter_batches(memoryview(data)):
            if h.is_control:
                continue
            for r in decode_records(data[pos: pos + h.size]):
                out.append((r.offset, r.key, r.value))
    return out


def compare_replicas(dirs: Iterable[Path]) -> None:
    """All replicas of one partition hold the same records (after they have caught up)."""
    dirs = list(dirs)
    contents = {d: replica_records(d) for d in dirs}
    first = dirs[0]
    for d in dirs[1:]:
        a, b = contents[first], contents[d]
        if a != b:
            mismatch = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                            min(len(a), len(b)))
            raise AssertionError(
                f"replicas differ: {first} has {len(a)} records, {d} has {len(b)}; first "
                f"difference at index {mismatch}")


class TcpProxy:
    """A TCP forwarder on 127.0.0.1 that a test can cut, to partition one process from another.

    ``cut()`` closes every forwarded connection and turns new ones away (accepted, then closed
    at once) until ``heal()``: to the process behind it the peer is unreachable, while both
    keep running.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._cut = threading.Event()
        self._closed = False
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self._cut.set()
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def heal(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()
