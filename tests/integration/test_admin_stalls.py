"""Large admin requests do not stall other clients.

CreateTopics of 10,000 partitions (the most one request may ask for) and CreatePartitions
adding 5,000 used to block the broker's event loop for their whole duration (~3 s): every
other client waited. A raw-socket client pings with ApiVersions while confluent-kafka's
AdminClient sends them; its worst round trip must stay far below that. The bound is generous
(a stall check, not a speed check: the machine is shared, and a full garbage collection over a
heap of ~15,000 partition logs alone takes a few hundred milliseconds). The new partitions
take records at once after the admin call returns.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from confluent_kafka.admin import NewPartitions, NewTopic

from . import clients as kc
from .clients import Msg
from .wire import NONE, Conn, records_of, simple_batch

pytestmark = pytest.mark.timeout(240)

T = 120  # seconds for an admin future (the request itself takes a few seconds)
STALL_LIMIT_S = 1.0  # worst ping allowed while a request runs (it was ~3 s)


class Pinger(threading.Thread):
    """ApiVersions v0 round trips in a loop on one connection, timing each."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.done = threading.Event()
        self.started_pinging = threading.Event()
        self.worst = 0.0
        self.count = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Conn(self.bootstrap, timeout=30) as c:
                while not self.done.is_set():
                    t = time.monotonic()
                    err, _ = c.api_versions_v0()
                    self.worst = max(self.worst, time.monotonic() - t)
                    assert err == NONE
                    self.count += 1
                    self.started_pinging.set()
        except BaseException as exc:  # reported by the test thread
            self.error = exc
            self.started_pinging.set()


@contextmanager
def pinging(bootstrap: str) -> Iterator[Pinger]:
    pinger = Pinger(bootstrap)
    pinger.start()
    assert pinger.started_pinging.wait(10), "no ApiVersions answer at all"
    try:
        yield pinger
    finally:
        pinger.done.set()
        pinger.join(60)
    assert not pinger.is_alive()
    if pinger.error is not None:
        raise pinger.error


def assert_takes_records(bootstrap: str, topic: str, partitions: list[int]) -> None:
    """Produce to each partition with a raw acks=-1 Produce and read it back (raw Fetch, and
    confluent-kafka's consumer for the first)."""
    with Conn(bootstrap, timeout=30) as c:
        for p in partitions:
            value = f"{topic}-{p}".encode()
            produced = c.produce(topic, p, simple_batch(value))
            assert (produced.error, produced.base_offset) == (NONE, 0), (topic, p)
            fetched = c.fetch(topic, p, 0)
            assert fetched.error == NONE
            assert [r.value for r in records_of(fetched.records)] == [value]
    first = partitions[0]
    msgs = kc.read_partition(bootstrap, topic, first)
    assert [m.value for m in msgs] == [f"{topic}-{first}".encode()]


def test_large_create_topics_and_create_partitions_do_not_stall_other_clients(
        make_broker, unique_topic):
    bs = make_broker().bootstrap
    admin = kc.admin(bs)
    big, grown = unique_topic("big"), unique_topic("grown")
    kc.produce(bs, grown, [Msg(None, b"before")], partition=0)  # auto-created, 1 partition

    with pinging(bs) as ping:
        admin.create_topics([NewTopic(big, 10_000, 1)], operation_timeout=T,
                            request_timeout=T)[big].result(T)
    assert ping.count >= 2
    assert ping.worst < STALL_LIMIT_S, f"CreateTopics stalled a client for {ping.worst:.2f}s"
    assert_takes_records(bs, big, [9_999, 0, 4_321])

    with pinging(bs) as ping:
        admin.create_partitions([NewPartitions(grown, 5_001)], operation_timeout=T,
                                request_timeout=T)[grown].result(T)
    assert ping.count >= 2
    assert ping.worst < STALL_LIMIT_S, f"CreatePartitions stalled a client for {ping.worst:.2f}s"
    assert_takes_records(bs, grown, [5_000, 1, 2_500])
    kc.wait_for_topic(bs, grown, 5_001)
