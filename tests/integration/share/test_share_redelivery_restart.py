"""Strom's redelivery delay (share.redelivery.delay.ms, a Strom extension) survives a broker
restart: a record released with a delay is not delivered again before the delay ends, even when
the broker restarts in between (SIGKILL or graceful stop). The delay's end is written to
`__share_group_state` with the release.

Checked with a marker produced after the restart: a share consumer gets the marker only after
every available record below it, so the released record arriving after the marker, and not
before the delay's end, shows it was still held back.
"""

from __future__ import annotations

import contextlib
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer

from .conftest import BROKER_SETTINGS, ShareAdmin, broker_kind

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(broker_kind() != "strom",
                                 reason="restarts a Strom process; Kafka has no redelivery delay")]

DELAY_S = 15
WAIT = 60.0


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_a_record_in_its_redelivery_delay_is_not_redelivered_early_after_a_restart(
        make_broker, how: str) -> None:
    broker = make_broker(BROKER_SETTINGS)
    admin = ShareAdmin(broker.bootstrap)
    topic = admin.create_topic(f"delay-{uuid.uuid4().hex[:8]}")
    group = f"delay-g-{uuid.uuid4().hex[:8]}"
    admin.set_group_configs(group, {"share.auto.offset.reset": "earliest",
                                    "share.redelivery.delay.ms": str(DELAY_S * 1000)})
    (offset,) = admin.produce(topic, ["job"])

    first = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                           "share.acknowledgement.mode": "explicit", "socket.timeout.ms": 3000})
    first.subscribe([topic])
    got = []
    deadline = time.monotonic() + WAIT
    while not got:
        assert time.monotonic() < deadline, "the record never came"
        for m in first.poll(0.5):
            assert m.error() is None, m.error()
            got.append((m.offset(), m.delivery_count()))
            first.acknowledge(m, AcknowledgeType.RELEASE)
    assert got == [(offset, 1)]
    results = first.commit_sync(30)  # the release is written before this returns
    released_at = time.monotonic()
    assert results and all(err is None for err in results.values()), results

    if how == "kill":
        broker.kill()
    else:
        assert broker.stop() == 0
    with contextlib.suppress(Exception):
        first.close()
    broker.restart()

    second = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    second.subscribe([topic])
    seen: list[tuple[int, int, float]] = []
    try:
        (marker,) = admin.produce(topic, ["marker"])
        deadline = time.monotonic() + WAIT
        while not any(o == offset for o, _, _ in seen):
            assert time.monotonic() < deadline, f"the released record never came back: {seen}"
            seen += [(m.offset(), m.delivery_count(), time.monotonic())
                     for m in second.poll(0.5) if m.error() is None]
        second.commit_sync(30)
    finally:
        second.close()
    marker_at = next(t for o, _, t in seen if o == marker)
    assert marker_at < released_at + DELAY_S, (
        f"the restart took longer than the delay: the check proves nothing ({seen})")
    (back,) = [(o, count, t) for o, count, t in seen if o == offset]
    assert back[1] == 2, f"redelivered with delivery count {back[1]}"
    assert back[2] >= released_at + DELAY_S - 0.5, (
        f"redelivered {back[2] - released_at:.1f} s after its release, before the "
        f"{DELAY_S} s delay ended")
    assert [o for o, _, _ in seen].index(marker) < [o for o, _, _ in seen].index(offset)
