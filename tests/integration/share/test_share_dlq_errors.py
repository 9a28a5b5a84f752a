"""A share group's dead-letter topic (KIP-1191) that cannot take dead letters, with
confluent-kafka's ShareConsumer against a Strom broker process: the topic does not exist, or
lacks errors.deadletterqueue.group.enable=true. Kafka 4.4 accepts the group config and archives
the rejected records without a dead letter (test_share_consumer.py checks that on both brokers);
Strom does the same and says why in an ERROR line of its log, asserted here.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer

from .conftest import BROKER_SETTINGS, ShareAdmin, broker_kind

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(broker_kind() == "kafka", reason="reads Strom's log")]

WAIT = 60.0


def _consume(bootstrap: str, group: str, topic: str, until: str) -> list[tuple[int, int, str]]:
    """Poll until ``until`` arrives; reject values starting with "reject", accept the rest."""
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    out: list[tuple[int, int, str]] = []
    deadline = time.monotonic() + WAIT
    try:
        while not any(v == until for _, _, v in out):
            assert time.monotonic() < deadline, out
            for m in c.poll(0.5):
                assert m.error() is None, m.error()
                value = m.value().decode()
                out.append((m.offset(), m.delivery_count(), value))
                c.acknowledge(m, AcknowledgeType.REJECT if value.startswith("reject")
                              else AcknowledgeType.ACCEPT)
        results = c.commit_sync(30)
        assert all(err is None for err in results.values()), results
    finally:
        c.close()
    return out


@pytest.mark.parametrize("case", ["missing", "not-enabled"])
def test_unusable_dead_letter_topic_is_logged(make_broker, case: str) -> None:
    broker = make_broker(BROKER_SETTINGS)
    admin = ShareAdmin(broker.bootstrap)
    suffix = uuid.uuid4().hex[:8]
    topic = admin.create_topic(f"dlq-src-{suffix}")
    dlq = f"dlq.{case}-{suffix}"
    if case == "not-enabled":
        admin.create_topic(dlq)  # no errors.deadletterqueue.group.enable
    group = f"dlq-{case}-{suffix}"
    admin.set_group_configs(group, {"share.auto.offset.reset": "earliest",
                                    "errors.deadletterqueue.topic.name": dlq})
    offsets = admin.produce(topic, ["ok", "reject-me", "after"])
    got = _consume(broker.bootstrap, group, topic, "after")
    assert [(o, n) for o, n, _ in got] == [(o, 1) for o in offsets]

    reason = ("does not exist" if case == "missing"
              else "does not allow it (errors.deadletterqueue.group.enable is not true)")
    line = re.compile(
        rf"level=ERROR .*share group {group}: records {offsets[1]}-{offsets[1]} of "
        rf"{topic}-0 \(Offset rejected by client\.\) archived without a dead letter: the "
        rf"(dead-letter )?topic '{re.escape(dlq)}' {re.escape(reason)}")
    deadline = time.monotonic() + WAIT
    while not line.search(broker.log_text(limit=1 << 20)):
        assert time.monotonic() < deadline, f"no ERROR line for {dlq}:\n{broker.log_tail()}"
        time.sleep(0.1)  # poll interval, not synchronisation
    if case == "missing":
        assert dlq not in admin.topic_names(), "the dead-letter topic was created"
    else:
        assert admin.end_offset(dlq) == 0
    # archived, not lost in limbo: a later member gets only what comes after
    admin.produce(topic, ["marker"])
    again = _consume(broker.bootstrap, group, topic, "marker")
    assert [v for _, _, v in again] == ["marker"]
