"""Share-group state across a broker restart, with confluent-kafka's ShareConsumer against a
Strom broker process: killed with SIGKILL, or stopped gracefully, while a consumer holds
acquired records it has not acknowledged and after it acknowledged others.

What must hold after the restart (KIP-932): acknowledged records (ACCEPT, REJECT) are never
delivered again; released records come back with their delivery count; records that were only
acquired come back too (Kafka does not persist an acquisition, so after a crash their delivery
count may be the one of the delivery before). Checked by offsets, with a marker produced after
the restart: the new consumer gets the marker only after every available record below it.
"""

from __future__ import annotations

import contextlib
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer

from .conftest import BROKER_SETTINGS, ShareAdmin, broker_kind

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(broker_kind() == "kafka", reason="restarts a Strom process")]

WAIT = 60.0


def _poll(consumer: ShareConsumer, until, *, acks=None, timeout: float = WAIT) -> list:
    out = []
    deadline = time.monotonic() + timeout
    while not until(out):
        assert time.monotonic() < deadline, f"gave up after {timeout:.0f} s with {out}"
        for m in consumer.poll(0.5):
            assert m.error() is None, m.error()
            out.append((m.offset(), m.delivery_count(), m.value().decode()))
            if acks is not None:
                consumer.acknowledge(m, acks[m.value().decode()])
    return out


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_share_state_survives_a_restart(make_broker, how: str) -> None:
    broker = make_broker(BROKER_SETTINGS)
    admin = ShareAdmin(broker.bootstrap)
    topic = admin.create_topic(f"restart-{uuid.uuid4().hex[:8]}")
    group = f"restart-g-{uuid.uuid4().hex[:8]}"
    admin.set_group_configs(group, {"share.auto.offset.reset": "earliest"})
    values = [f"v{i}" for i in range(10)]
    offsets = dict(zip(values, admin.produce(topic, values), strict=True))
    # v0-v3 accepted, v4 rejected, v5 released; v6-v9 polled (acquired) and not acknowledged
    acks = {v: AcknowledgeType.ACCEPT for v in values[:4]}
    acks.update({"v4": AcknowledgeType.REJECT, "v5": AcknowledgeType.RELEASE})

    first = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                           "share.acknowledgement.mode": "explicit", "socket.timeout.ms": 3000})
    first.subscribe([topic])
    got: list = []
    deadline = time.monotonic() + WAIT
    while len(got) < 10:  # every record of a poll is acknowledged before the next poll
        assert time.monotonic() < deadline, got
        for m in first.poll(0.5):
            assert m.error() is None, m.error()
            got.append((m.offset(), m.delivery_count(), m.value().decode()))
            if m.value().decode() in acks:  # v6-v9: held, unacknowledged (one poll has all)
                first.acknowledge(m, acks[m.value().decode()])
    assert sorted(o for o, _, _ in got) == sorted(offsets.values())
    results = first.commit_sync(30)
    assert results and all(err is None for err in results.values()), results

    if how == "kill":
        broker.kill()
    else:
        assert broker.stop() == 0
    with contextlib.suppress(Exception):
        first.close()  # the broker is gone: nothing more reaches it
    broker.restart()

    second = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    second.subscribe([topic])
    try:
        (marker,) = admin.produce(topic, ["marker"])
        again = _poll(second, lambda out: any(v == "marker" for _, _, v in out))
        second.commit_sync(30)
    finally:
        second.close()
    by_offset: dict[int, list[int]] = {}
    for offset, count, _ in again:
        by_offset.setdefault(offset, []).append(count)
    expected = [offsets[v] for v in ("v5", "v6", "v7", "v8", "v9")] + [marker]
    assert sorted(by_offset) == expected, f"acknowledged records came back, or held ones not: {again}"
    assert all(len(counts) == 1 for counts in by_offset.values()), again
    assert by_offset[offsets["v5"]] == [2], "a released record keeps its delivery count"
    assert all(by_offset[offsets[v]][0] in (1, 2) for v in ("v6", "v7", "v8", "v9")), again
    assert by_offset[marker] == [1]
