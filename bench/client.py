"""The client side of every scenario, run in its own process (``python -m bench.client JSON``).

Keeping the Kafka client out of the harness process means its CPU never mixes with the
harness's, and each job starts from a clean librdkafka. The harness talks to a job over three
lines: the job prints ``READY`` once connected, waits for ``GO`` on stdin (the harness samples
the broker's CPU in between), and prints ``RESULT {json}`` when done.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import struct
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from bench.config import CONSUMER, PRODUCER_LATENCY, PRODUCER_THROUGHPUT

Job = dict[str, Any]
# Clients a job asked to keep connected after its result (see main).
HELD: list[Any] = []
CHUNK_BYTES = 64 * 1024 * 1024
# A consumer that sees no new record for this long gives up and reports the shortfall.
IDLE_TIMEOUT = 15.0


def _ready() -> None:
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    line = sys.stdin.readline()
    if line.strip() != "GO":
        raise SystemExit(f"expected GO, got {line!r}")


class _Errors:
    """Counts failed deliveries (delivery reports arrive only for failures, see config)."""

    def __init__(self) -> None:
        self.count = 0
        self.first: str | None = None

    def on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.count += 1
            self.first = self.first or str(err)


def reach(job: Job) -> dict[str, Any]:
    """How a client reaches the job's broker: bootstrap.servers, plus the listener's security
    settings when it has some (SSL: security.protocol and the CA to trust)."""
    return {"bootstrap.servers": job["bootstrap"], **job.get("security", {})}


def _producer(job: Job, base: dict[str, Any], errors: _Errors) -> Producer:
    cfg = {**reach(job), **base, **job.get("extra", {})}
    if "acks" in job:
        cfg["acks"] = job["acks"]
    cfg["on_delivery"] = errors.on_delivery
    return Producer(cfg)


def _wait_metadata(client: Producer | Consumer, topic: str, timeout: float = 30.0) -> list[int]:
    """Poll metadata until ``topic`` is known with leaders; return its partition ids."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            md = client.list_topics(topic, timeout=5)
            t = md.topics.get(topic)
            if (
                t is not None
                and t.error is None
                and t.partitions
                and all(p.leader >= 0 for p in t.partitions.values())
            ):
                return sorted(t.partitions)
        except KafkaException:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic} not ready in metadata after {timeout}s")
        time.sleep(0.05)


# -- jobs -------------------------------------------------------------------------------------


def job_ceiling(job: Job) -> dict[str, Any]:
    """produce() into librdkafka's local queue with no broker: the client's own ceiling.

    Only the produce() calls are timed. The queue is emptied (untimed) every CHUNK_BYTES, as a
    broker would drain it, so the ceiling is not dragged down by the page faults of a queue
    that grows to hundreds of megabytes.

    A second pass times what every delivered record also costs the application's thread:
    confluent-kafka keeps a small state per record and releases it in a delivery report served
    by poll()/flush(), even when only errors reach a callback. Records purged from the queue
    take the same path, so the pass produces (untimed), purges and times the serving. Its
    producer has no callback: a purged record's report carries an error, and a callback would
    run Python for it, while a delivered record's report, with only errors reported, runs none.
    """
    _ready()
    out = {}
    for size, count in job["sizes"]:
        p = _producer(
            {"bootstrap": job["bootstrap"], "extra": {"log_level": 0}},
            PRODUCER_THROUGHPUT,
            _Errors(),
        )
        seconds = _produce_and_purge(p, job["topic"], size, count, time_reports=False)
        p.flush(5)
        del p
        bare = Producer(
            {"bootstrap.servers": job["bootstrap"], **PRODUCER_THROUGHPUT, "log_level": 0}
        )
        reports = _produce_and_purge(bare, job["topic"], size, count, time_reports=True)
        del bare
        out[str(size)] = {"records": count, "seconds": seconds, "report_seconds": reports}
    return out


def _produce_and_purge(
    p: Producer, topic: str, size: int, count: int, *, time_reports: bool
) -> float:
    """Produce ``count`` records, purging the queue every CHUNK_BYTES; return the seconds spent
    in the produce() calls or, with ``time_reports``, in serving the purged records' reports."""
    value = os.urandom(size)
    produce = p.produce
    chunk = max(1, CHUNK_BYTES // size)
    elapsed, left = 0.0, count
    while left > 0:
        n = min(chunk, left)
        t0 = time.perf_counter()
        for _ in range(n):
            produce(topic, value)
        produced = time.perf_counter()
        p.purge()
        if time_reports:
            purged = time.perf_counter()
            while len(p):
                p.poll(0)
            elapsed += time.perf_counter() - purged
        else:
            elapsed += produced - t0
        left -= n
    return elapsed


def _values(job: Job, count: int) -> Iterator[bytes]:
    """The ``count`` values a produce job sends: one random value of ``size`` bytes, over and
    over; or, with ``avro`` (the schema id), a pool of Avro records framed as Confluent's
    serializers do (bench/avro_records.py), serialized here once and cycled; or, with
    ``json``, a pool of JSON objects of the same events (bench/json_records.py), cycled."""
    if job.get("json"):
        from bench import json_records

        pool = json_records.values(job.get("pool", json_records.POOL), job["size"])
        return itertools.islice(itertools.cycle(pool), count)
    if "avro" not in job:
        return itertools.repeat(os.urandom(job["size"]), count)
    from bench import avro_records

    pool = avro_records.values(job["avro"], job.get("pool", avro_records.POOL), job["size"])
    return itertools.islice(itertools.cycle(pool), count)


def job_produce(job: Job) -> dict[str, Any]:
    """Produce ``count`` records of ``size`` bytes as fast as the client goes, then flush
    (random bytes, or with ``avro``/``json`` pre-serialized records, see :func:`_values`)."""
    errors = _Errors()
    p = _producer(job, PRODUCER_THROUGHPUT, errors)
    topic, count = job["topic"], job["count"]
    _wait_metadata(p, topic)
    stream = _values(job, count)
    _ready()
    produce, poll = p.produce, p.poll
    cpu0, t0 = time.process_time(), time.perf_counter()
    for value in stream:
        try:
            produce(topic, value)
        except BufferError:
            while True:
                poll(0.001)
                try:
                    produce(topic, value)
                    break
                except BufferError:
                    continue
    # Delivery reports are served only by poll()/flush() in this thread: after the last
    # produce(), flush() waits for the broker and then releases every delivered record.
    loop_end = time.perf_counter()
    remaining = p.flush(job.get("timeout", 120))
    elapsed = time.perf_counter() - t0
    if job.get("hold"):
        HELD.append(p)
    return {
        "records": count,
        "seconds": elapsed,
        "loop_seconds": loop_end - t0,
        "client_cpu_s": time.process_time() - cpu0,
        "failed": errors.count + remaining,
        "first_error": errors.first,
    }


def _consume_all(
    c: Consumer,
    topic: str,
    parts: list[int],
    expected: int,
    timeout: float,
    start: int = OFFSET_BEGINNING,
) -> Job:
    """Read every partition from ``start`` (the beginning) until ``expected`` records arrived.

    Correctness is checked without decoding records: the count must match, the consumer's
    positions must add up to it (no duplicates or gaps) and so must the high watermarks the
    broker reported in its Fetch responses (nothing extra in the log).
    """
    tps = [TopicPartition(topic, p, start) for p in parts]
    cpu0, t0 = time.process_time(), time.perf_counter()
    deadline = time.monotonic() + timeout
    c.assign(tps)
    count = errors = 0
    first_error = None
    consume = c.consume
    stalled = False
    last_progress = time.monotonic()
    while count < expected:
        msgs = consume(num_messages=min(10_000, expected - count), timeout=0.2)
        bad = [m for m in msgs if m.error() is not None]
        if bad:
            errors += len(bad)
            first_error = first_error or str(bad[0].error())
        count += len(msgs) - len(bad)
        now = time.monotonic()
        if len(msgs) > len(bad):
            last_progress = now
        elif now - last_progress > IDLE_TIMEOUT:
            stalled = True
            break
        if now > deadline:
            break
    elapsed = time.perf_counter() - t0
    client_cpu = time.process_time() - cpu0
    positions = sum(max(tp.offset, 0) for tp in c.position(tps))
    hwm = 0
    for tp in tps:
        _, high = c.get_watermark_offsets(tp, cached=True)
        hwm += max(high, 0)
    problem = None
    if count != expected:
        problem = f"consumed {count} of {expected} records"
        if stalled:
            problem += f" (nothing more arrived for {IDLE_TIMEOUT:.0f} s){_stall_report(c, tps)}"
        elif time.monotonic() > deadline:
            problem += f" before the {timeout:.0f} s deadline"
    elif positions != expected:
        problem = f"positions add up to {positions}, expected {expected} (duplicates or gaps)"
    elif hwm != expected:
        problem = f"high watermarks add up to {hwm}, expected {expected}"
    return {
        "records": count,
        "seconds": elapsed,
        "client_cpu_s": client_cpu,
        "errors": errors,
        "first_error": first_error,
        "problem": problem,
    }


def _stall_report(c: Consumer, tps: list[TopicPartition]) -> str:
    """Where the partitions that delivered nothing stand: a position of -1001 means the offset
    lookup never finished, a cached high watermark of -1001 that no Fetch answered for it."""
    positions = c.position(tps)
    idle = [tp for tp in positions if tp.offset <= 0]
    if not idle:
        return ""
    shapes: dict[str, int] = {}
    for tp in idle:
        low, high = c.get_watermark_offsets(tp, cached=True)
        key = f"position {tp.offset}, cached watermarks {low}/{high}"
        shapes[key] = shapes.get(key, 0) + 1
    first = ", ".join(str(tp.partition) for tp in idle[:8])
    return f"; {len(idle)} partitions idle (e.g. {first}): {shapes}"


def _consumer(job: Job) -> Consumer:
    return Consumer({**reach(job), "group.id": "strom-bench", **CONSUMER})


def job_consume(job: Job) -> dict[str, Any]:
    """Consume a topic from the beginning (or from offset ``start``) and check exactly
    ``expected`` records are there."""
    c = _consumer(job)
    try:
        parts = _wait_metadata(c, job["topic"])
        _ready()
        start = job.get("start", OFFSET_BEGINNING)
        return _consume_all(c, job["topic"], parts, job["expected"], job.get("timeout", 300), start)
    finally:
        c.close()


def job_latency_consume(job: Job) -> dict[str, Any]:
    """Receive the paced records and compute send→receive latency from their embedded clock.

    CLOCK_MONOTONIC is shared by all processes on the machine, so the producer's stamp and the
    consumer's reading compare directly.
    """
    c = _consumer(job)
    topic, expected, skip = job["topic"], job["expected"], job["warmup_records"]
    try:
        parts = _wait_metadata(c, topic)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        # One poll so the first fetches are in flight before the producer starts.
        c.poll(0.2)
        _ready()
        latencies: list[int] = []
        count = 0
        deadline = time.monotonic() + job["timeout"]
        poll, now, unpack = c.poll, time.monotonic_ns, struct.Struct(">qq").unpack_from
        while count < expected and time.monotonic() < deadline:
            m = poll(0.5)
            if m is None:
                continue
            t = now()
            if m.error() is not None:
                continue
            count += 1
            seq, sent = unpack(m.value())
            if seq >= skip:
                latencies.append(t - sent)
    finally:
        c.close()
    latencies.sort()
    return {
        "records": count,
        "expected": expected,
        "latencies_us": _percentiles([x / 1000 for x in latencies]),
        "samples": len(latencies),
    }


def _percentiles(sorted_values: list[float]) -> dict[str, float]:
    if not sorted_values:
        return {}
    n = len(sorted_values)

    def pick(q: float) -> float:  # nearest rank
        return sorted_values[min(n - 1, max(0, math.ceil(q * n) - 1))]

    return {"p50": pick(0.5), "p99": pick(0.99), "p99.9": pick(0.999), "max": sorted_values[-1]}


def job_latency_produce(job: Job) -> dict[str, Any]:
    """Send records at a fixed rate, each carrying its sequence number and send time."""
    errors = _Errors()
    p = _producer(job, PRODUCER_LATENCY, errors)
    topic, rate, total = job["topic"], job["rate"], job["count"]
    _wait_metadata(p, topic)
    pad = os.urandom(max(0, job["size"] - 16))
    pack, now = struct.Struct(">qq").pack, time.monotonic_ns
    interval = 1e9 / rate
    _ready()
    late = 0
    start = now()
    for seq in range(total):
        due = start + int(seq * interval)
        wait = due - now()
        if wait > 0:
            time.sleep(wait / 1e9)
        elif wait < -1_000_000:
            late += 1  # more than 1 ms behind schedule: the client itself lagged
        p.produce(topic, pack(seq, now()) + pad)
        p.poll(0)
    remaining = p.flush(30)
    return {
        "records": total,
        "seconds": (now() - start) / 1e9,
        "failed": errors.count + remaining,
        "first_error": errors.first,
        "late": late,
    }


def job_many_partitions(job: Job) -> dict[str, Any]:
    """Create a topic with many partitions, produce ``each`` records to every one, read all."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, n, each = job["topic"], job["partitions"], job["each"]
    admin = AdminClient(reach(job))
    errors = _Errors()
    p = _producer(job, PRODUCER_THROUGHPUT, errors)
    c = _consumer(job)
    p.list_topics(timeout=10)
    _ready()
    t0 = time.perf_counter()
    fut = admin.create_topics([NewTopic(topic, n, 1)], request_timeout=120)[topic]
    fut.result(timeout=120)
    parts = _wait_metadata(p, topic, timeout=120)
    if len(parts) != n:
        raise RuntimeError(f"topic has {len(parts)} partitions, asked for {n}")
    # The consumer was made before the topic existed: without this it learns the topic only
    # at its next metadata refresh tick, 0-1 s after assign(), a wait that has nothing to do
    # with the broker (measured: 0.46 s of a 0.65 s consume phase).
    _wait_metadata(c, topic, timeout=120)
    t1 = time.perf_counter()
    value = os.urandom(job["size"])
    for part in parts:
        for _ in range(each):
            p.produce(topic, value, partition=part)
    remaining = p.flush(120)
    t2 = time.perf_counter()
    consumed = _consume_all(c, topic, parts, n * each, job.get("timeout", 300))
    t3 = time.perf_counter()
    c.close()
    failed = errors.count + remaining
    problem = consumed["problem"] or (f"{failed} records not delivered" if failed else None)
    return {
        "create_s": t1 - t0,
        "produce_s": t2 - t1,
        "consume_s": t3 - t2,
        "total_s": t3 - t0,
        "records": consumed["records"],
        "problem": problem,
    }


def job_churn(job: Job) -> dict[str, Any]:
    """Many short-lived producers: connect, produce one record, flush, close."""
    topic, n = job["topic"], job["connections"]
    value = os.urandom(job["size"])
    delivered = [0]
    first_error: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            delivered[0] += 1
        elif not first_error:
            first_error.append(str(err))

    cfg = {
        **reach(job),
        "acks": 1,
        **PRODUCER_LATENCY,
        "delivery.report.only.error": False,
    }
    _ready()
    each = []
    t0 = time.perf_counter()
    for _ in range(n):
        t = time.perf_counter()
        p = Producer(cfg)
        p.produce(topic, value, on_delivery=on_delivery)
        p.flush(30)
        p.close()
        each.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - t0
    each.sort()
    return {
        "connections": n,
        "seconds": elapsed,
        "median_s": each[len(each) // 2],
        # librdkafka sometimes drops its bootstrap connection with a topic Metadata request in
        # flight and retries 100 ms later: such a producer takes over 50 ms.
        "slow": sum(1 for x in each if x > 0.05),
        "delivered": delivered[0],
        "first_error": first_error[0] if first_error else None,
    }


def job_one_per_partition(job: Job) -> dict[str, Any]:
    """One record into every partition of a (large) topic, so a restart has data to recover."""
    errors = _Errors()
    p = _producer(job, PRODUCER_THROUGHPUT, errors)
    parts = _wait_metadata(p, job["topic"], timeout=120)
    value = os.urandom(job["size"])
    _ready()
    t0 = time.perf_counter()
    for part in parts:
        p.produce(job["topic"], value, partition=part)
    remaining = p.flush(120)
    return {
        "records": len(parts),
        "seconds": time.perf_counter() - t0,
        "failed": errors.count + remaining,
        "first_error": errors.first,
    }


def _http_job(name: str) -> Callable[[Job], dict[str, Any]]:
    """A job of bench/http_client.py (the http-1k scenario's HTTP clients), imported on use."""

    def run(job: Job) -> dict[str, Any]:
        from bench import http_client

        return http_client.JOBS[name](job)

    return run


JOBS: dict[str, Callable[[Job], dict[str, Any]]] = {
    "ceiling": job_ceiling,
    "produce": job_produce,
    "consume": job_consume,
    "latency_produce": job_latency_produce,
    "latency_consume": job_latency_consume,
    "many_partitions": job_many_partitions,
    "churn": job_churn,
    "one_per_partition": job_one_per_partition,
    **{name: _http_job(name) for name in ("http_produce", "http_load", "http_consume")},
}


def main() -> None:
    job = json.loads(sys.argv[1])
    try:
        result = JOBS[job["job"]](job)
    except Exception as e:
        result = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=3)}
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
    if job.get("hold"):
        # The job parked its producer in HELD: keep its connection open until the harness
        # writes a line or closes stdin.
        sys.stdin.readline()


if __name__ == "__main__":
    main()
