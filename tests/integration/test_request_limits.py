"""Small requests that ask for a lot of work: Kafka's caps, and other clients kept served."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from .wire import NONE, UNKNOWN_TOPIC_OR_PARTITION, Conn

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(make_module_broker):
    return make_module_broker({"auto.create.topics.enable": "true", "num.partitions": 3})


class Pinger:
    """A second client sending ApiVersions in a loop; records its slowest answer."""

    def __init__(self, bootstrap: str) -> None:
        self.conn = Conn(bootstrap)
        self.worst_s = 0.0
        self.answers = 0
        self._running = True
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while self._running:
            started = time.monotonic()
            self.conn.api_versions_v0()
            self.worst_s = max(self.worst_s, time.monotonic() - started)
            self.answers += 1

    def __enter__(self) -> Pinger:
        self._thread.start()
        deadline = time.monotonic() + 10
        while self.answers < 3 and time.monotonic() < deadline:  # it is being answered
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._running = False
        self._thread.join(timeout=30)
        self.conn.close()


def test_auto_creating_many_topics_keeps_other_clients_served(broker):
    names = [f"many-{uuid.uuid4().hex[:8]}-{i}" for i in range(1000)]
    with Conn(broker.bootstrap, timeout=100) as conn, Pinger(broker.bootstrap) as pinger:
        started = time.monotonic()
        _, topics = conn.metadata(names, allow_auto_create=True)
        took = time.monotonic() - started
    assert {topics[n].error for n in names} == {NONE}
    assert pinger.answers > 10
    # the request works for seconds; unsliced, the other client waited all of it (6.5 s). A
    # stall check, not a speed check: generous for a loaded machine
    assert pinger.worst_s < max(took / 2, 1.0), (pinger.worst_s, took)


def test_auto_creating_more_than_10000_partitions_creates_none(broker):
    # 3,334 new names x num.partitions 3 = 10,002 partitions: Kafka's controller refuses the
    # whole CreateTopics, and Metadata answers UNKNOWN_TOPIC_OR_PARTITION for each
    names = [f"over-{uuid.uuid4().hex[:8]}-{i}" for i in range(3334)]
    log_mark = broker.log_size()
    with Conn(broker.bootstrap, timeout=60) as conn:
        _, topics = conn.metadata(names, allow_auto_create=True)
        assert {topics[n].error for n in names} == {UNKNOWN_TOPIC_OR_PARTITION}
        _, again = conn.metadata(names[:5], allow_auto_create=False)
    assert {again[n].error for n in names[:5]} == {UNKNOWN_TOPIC_OR_PARTITION}
    deadline = time.monotonic() + 10
    while "not auto-creating the 3334 new topics" not in broker.log_text(log_mark):
        assert time.monotonic() < deadline, "no WARN line says why nothing was created"
        time.sleep(0.05)
