"""Kafka Streams 4.4 on Strom: exactly-once counting through the crash of an instance.

Two instances of each application (compat/java/frameworks) share the input's partitions with
``processing.guarantee=exactly_once_v2``. Mid-stream one instance is killed with SIGKILL; the
other takes over its tasks, restoring their state stores from the changelog topics. The record
cache is off, so every count update reaches the output: under exactly-once the committed
updates of each key are exactly 1, 2, …, n — a record counted twice or lost would show there —
and the last one equals the reference the test computes from what it produced.

Each test runs with both rebalance protocols: the classic one (the Streams partition assignor on
the clients, JoinGroup/SyncGroup) and ``group.protocol=streams`` (KIP-1071: the broker validates
the topology, creates the internal topics and assigns the tasks). With the streams protocol the
session timeout is the broker's ``group.streams.session.timeout.ms``, shortened here like the
clients' ``session.timeout.ms`` so a killed instance's tasks move within seconds.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from ..clients import create_topic, producer
from .jvm import JavaProcess, wait_until
from .streams import OutputReader, active_tasks, restored_records, state

pytestmark = pytest.mark.slow

PARTITIONS = 4
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
         "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu"]  # fmt: skip
REGIONS = ["north", "south", "east", "west"]
MINUTE = 60_000
# The streams protocol's session timeout and heartbeat interval are the broker's; Kafka's lower
# bounds (45 s, 5 s) would refuse these at start-up.
STREAMS_OVERRIDES = {
    "group.streams.session.timeout.ms": 6000,
    "group.streams.min.session.timeout.ms": 1000,
    "group.streams.heartbeat.interval.ms": 1000,
    "group.streams.min.heartbeat.interval.ms": 100,
}


@pytest.fixture(scope="module")
def broker(make_module_broker):
    return make_module_broker(STREAMS_OVERRIDES)


@pytest.fixture(params=["classic", "streams"])
def protocol(request) -> list[str]:
    """The extra properties that select the rebalance protocol (classic is the default)."""
    return [] if request.param == "classic" else [f"group.protocol={request.param}"]


class Instances:
    """Starts instances of one Streams application, each with its own state directory."""

    def __init__(self, jvms: Callable[..., JavaProcess], libs: Path, classes: Path,
                 tmp: Path, main: str, fixed_args: list[str], extra: list[str]) -> None:
        self.jvms, self.libs, self.classes, self.tmp = jvms, libs, classes, tmp
        self.main, self.fixed_args, self.extra = main, fixed_args, extra

    def start(self, name: str, bootstrap: str, app_id: str) -> JavaProcess:
        state_dir = self.tmp / f"state-{name}"
        return self.jvms(name, [self.libs, self.classes], f"io.strom.frameworks.{self.main}",
                         [bootstrap, app_id, str(state_dir), *self.fixed_args, *self.extra])


def wait_sharing(a: JavaProcess, b: JavaProcess, tasks: int) -> None:
    """Both instances RUNNING, each with active tasks, together covering all of them."""
    def sharing() -> bool:
        ta, tb = active_tasks(a), active_tasks(b)
        return bool(state(a) == state(b) == "RUNNING" and ta and tb and len(ta | tb) == tasks)

    wait_until(sharing, 90, "two instances sharing the tasks",
               lambda: f"a: {state(a)} {active_tasks(a)}\nb: {state(b)} {active_tasks(b)}")


def produce_paced(bootstrap: str, topic: str, records: list[tuple[str, str, int | None]],
                  chunks: int, started: threading.Event) -> None:
    """Produce in ``chunks`` flushed pieces a little apart, so a crash lands mid-stream."""
    p = producer(bootstrap, enable_idempotence=True, acks="all")
    size = -(-len(records) // chunks)
    for i in range(0, len(records), size):
        for key, value, ts in records[i:i + size]:
            p.produce(topic, key=key.encode(), value=value.encode(),
                      **({"timestamp": ts} if ts is not None else {}))
        assert p.flush(30) == 0
        started.set()
        threading.Event().wait(0.15)  # pacing, not synchronisation
    assert p.flush(30) == 0


def crash_mid_stream(bootstrap: str, a: JavaProcess, b: JavaProcess, topic: str,
                     second_half: list[tuple[str, str, int | None]]) -> None:
    """Produce the second half while killing ``b`` once some of it is on the broker."""
    started = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            produce_paced(bootstrap, topic, second_half, 20, started)
        except BaseException as e:  # reported below
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(30), "the second half did not start"
    b.kill()
    thread.join(120)
    assert not thread.is_alive() and not errors, errors


def assert_exactly_once(reader: OutputReader, expected: dict[str, int], timeout: float,
                        apps: list[JavaProcess]) -> None:
    def done() -> bool:
        reader.poll()
        return reader.latest() == expected

    def detail() -> str:
        got = reader.latest()
        wrong = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
        apps_now = "\n".join(f"{a.name}: {state(a)} {active_tasks(a)}" for a in apps)
        return f"(got, expected) where they differ: {wrong}\n{apps_now}"

    wait_until(done, timeout, "the output to reach the reference counts", detail)
    reader.poll(1.0)  # anything committed after the last check would show as an extra update
    wrong = {k: v for k, v in reader.updates.items() if v != list(range(1, expected[k] + 1))}
    assert not wrong, f"updates that are not exactly 1..n (double counting or loss): {wrong}"
    assert set(reader.updates) == set(expected)


def test_word_count_exactly_once_through_a_killed_instance(broker, protocol, jvms,
                                                           framework_libs, streams_classes,
                                                           tmp_path, unique_topic) -> None:
    bootstrap = broker.bootstrap
    source, sink = unique_topic("lines"), unique_topic("counts")
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, 2)
    rng = random.Random(7)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))) for _ in range(3000)]
    expected = dict(Counter(w for line in lines for w in line.split()))
    records = [(f"line-{i}", line, None) for i, line in enumerate(lines)]
    app_id = unique_topic("wordcount")
    apps = Instances(jvms, framework_libs, streams_classes, tmp_path, "WordCount", [source, sink],
                     protocol)
    a = apps.start("wordcount-a", bootstrap, app_id)
    b = apps.start("wordcount-b", bootstrap, app_id)
    wait_sharing(a, b, 2 * PARTITIONS)  # two sub-topologies: split+regroup, count
    reader = OutputReader(bootstrap, sink, 2)
    try:
        started = threading.Event()
        produce_paced(bootstrap, source, records[:1500], 5, started)
        wait_until(lambda: (reader.poll(), reader.updates)[1], 60, "first counts on the output")
        crash_mid_stream(bootstrap, a, b, source, records[1500:])
        assert_exactly_once(reader, expected, 120, [a, b])
        wait_until(lambda: active_tasks(a) is not None and len(active_tasks(a)) == 2 * PARTITIONS,
                   60, "the survivor to own every task", lambda: f"{active_tasks(a)}")
        assert restored_records(a) > 0, "the survivor restored nothing from the changelog"
    finally:
        reader.close()


def test_windowed_join_exactly_once_through_a_killed_instance(broker, protocol, jvms,
                                                              framework_libs, streams_classes,
                                                              tmp_path, unique_topic) -> None:
    bootstrap = broker.bootstrap
    orders, customers, sink = unique_topic("orders"), unique_topic("customers"), unique_topic("per-region")
    create_topic(bootstrap, orders, PARTITIONS)
    create_topic(bootstrap, customers, PARTITIONS, {"cleanup.policy": "compact"})
    create_topic(bootstrap, sink, 2)
    rng = random.Random(11)
    now = int(time.time() * 1000)
    base = now - 30 * MINUTE - now % MINUTE
    region_of = {f"c{i:02d}": rng.choice(REGIONS) for i in range(30)}
    # Customers first and older than every order, so each order meets its customer in the table.
    cust = [(c, r, base - MINUTE) for c, r in region_of.items()]
    p = producer(bootstrap, enable_idempotence=True)
    for key, value, ts in cust:
        p.produce(customers, key=key.encode(), value=value.encode(), timestamp=ts)
    assert p.flush(30) == 0
    ids = [*region_of, "c98", "c99"]  # two customers the table does not know: inner join drops them
    order_records = []
    for i in range(2400):
        ts = base + i * 250 + rng.randint(0, 200)  # ten minutes of event time
        order_records.append((rng.choice(ids), str(rng.randint(1, 500)), ts))
    expected = dict(Counter(f"{region_of[c]}@{ts - ts % MINUTE}" for c, _, ts in order_records
                            if c in region_of))
    app_id = unique_topic("regional")
    apps = Instances(jvms, framework_libs, streams_classes, tmp_path, "RegionalOrders",
                     [orders, customers, sink], protocol)
    a = apps.start("regional-a", bootstrap, app_id)
    b = apps.start("regional-b", bootstrap, app_id)
    wait_sharing(a, b, 2 * PARTITIONS)  # join+regroup, windowed count
    reader = OutputReader(bootstrap, sink, 2)
    try:
        started = threading.Event()
        produce_paced(bootstrap, orders, order_records[:1200], 5, started)
        wait_until(lambda: (reader.poll(), reader.updates)[1], 60, "first counts on the output")
        crash_mid_stream(bootstrap, a, b, orders, order_records[1200:])
        assert_exactly_once(reader, expected, 120, [a, b])
        assert restored_records(a) > 0, "the survivor restored nothing from the changelogs"
    finally:
        reader.close()
