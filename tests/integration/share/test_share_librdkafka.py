"""Share groups (KIP-932) with confluent-kafka's ``ShareConsumer`` (librdkafka 2.16's share
consumer, a preview in that release) against a real broker process: implicit and explicit
acknowledgement, several consumers on one partition, close() releasing what a consumer holds.

``Message.delivery_count()`` is the record's delivery count (1 on its first delivery).
"Never delivered again" is checked with a marker: a record produced after the ones under test
reaches a consumer only after every available record below it, so once the marker is in, a
redelivery would have come first.

Like the Java tests beside it, these run against Strom by default and against Apache Kafka 4.4
with ``STROM_SHARE_BROKER=kafka`` (they pass on both; Kafka needs Java, Strom does not).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer

from .conftest import ShareAdmin, ShareBroker, broker_kind, strom_share_broker, unique

WAIT = 60.0  # generous bound for anything that should take a few seconds


@dataclass(frozen=True)
class Got:
    offset: int
    delivery_count: int
    value: str


@pytest.fixture(scope="module")
def rd_broker(request, tmp_path_factory) -> Iterator[ShareBroker]:
    """Strom (no Java needed) or, with STROM_SHARE_BROKER=kafka, the session's Kafka 4.4."""
    if broker_kind() == "kafka":
        yield request.getfixturevalue("share_broker")
        return
    with strom_share_broker(tmp_path_factory, "share-rd") as broker:
        yield broker


@pytest.fixture(scope="module")
def admin(rd_broker: ShareBroker) -> ShareAdmin:
    return ShareAdmin(rd_broker.bootstrap)


@pytest.fixture
def consumers(rd_broker: ShareBroker) -> Iterator[Callable[..., ShareConsumer]]:
    """``consumers(group, topic, **config)``: a subscribed ShareConsumer, closed after the test."""
    made: list[ShareConsumer] = []

    def make(group: str, topic: str, **config: object) -> ShareConsumer:
        c = ShareConsumer({"bootstrap.servers": rd_broker.bootstrap, "group.id": group,
                           **{k.replace("_", "."): v for k, v in config.items()}})
        c.subscribe([topic])
        made.append(c)
        return c

    yield make
    for c in made:
        with contextlib.suppress(Exception):  # closed by the test already
            c.close()


def setup_group(admin: ShareAdmin, prefix: str, **configs: str) -> tuple[str, str]:
    topic = admin.create_topic(unique(prefix))
    group = unique(f"{prefix}-g")
    admin.set_group_configs(group, {"share.auto.offset.reset": "earliest", **configs})
    return topic, group


def poll_until(consumer: ShareConsumer, done: Callable[[list[Got]], bool], *,
               ack: Callable[[Got], AcknowledgeType] | None = None,
               timeout: float = WAIT) -> list[Got]:
    """Poll until ``done(everything so far)``; in explicit mode ``ack`` says how to acknowledge
    each record (every record of a poll is acknowledged before the next poll)."""
    out: list[Got] = []
    deadline = time.monotonic() + timeout
    while not done(out):
        assert time.monotonic() < deadline, f"gave up after {timeout:.0f} s with {out}"
        for msg in consumer.poll(0.5):
            assert msg.error() is None, msg.error()
            got = Got(msg.offset(), msg.delivery_count(), msg.value().decode())
            out.append(got)
            if ack is not None:
                consumer.acknowledge(msg, ack(got))
    return out


def has(value: str) -> Callable[[list[Got]], bool]:
    return lambda got: any(g.value == value for g in got)


def test_implicit_acknowledgement(admin, consumers):
    """Implicit mode (the default): what a poll returned is accepted by the next poll or by
    commit_sync(); a later member of the group gets none of it again."""
    topic, group = setup_group(admin, "rd-implicit")
    offsets = admin.produce(topic, [f"v{i}" for i in range(5)])
    first = consumers(group, topic)
    got = poll_until(first, lambda g: len(g) >= 5)
    assert [(g.offset, g.delivery_count) for g in got] == [(o, 1) for o in offsets]
    results = first.commit_sync(30)  # accepts the last poll's records
    assert results and all(err is None for err in results.values()), results
    first.close()

    second = consumers(group, topic)
    (marker,) = admin.produce(topic, ["marker"])
    got = poll_until(second, has("marker"))
    assert [(g.offset, g.delivery_count) for g in got] == [(marker, 1)]


def test_implicit_close_releases_the_last_poll(admin, consumers):
    """librdkafka 2.16's limitation, the same against Apache Kafka 4.4: in implicit mode,
    close() does not accept the records of the last poll (Java's KafkaShareConsumer does); they
    are released and delivered again, delivery count 2. Nothing is lost (at-least-once), but an
    application should call commit_sync() before close()."""
    topic, group = setup_group(admin, "rd-implicit-close")
    offsets = admin.produce(topic, ["a", "b"])
    first = consumers(group, topic)
    poll_until(first, lambda g: len(g) >= 2)
    first.close()
    second = consumers(group, topic)
    got = poll_until(second, lambda g: len(g) >= 2)
    assert [(g.offset, g.delivery_count) for g in got] == [(o, 2) for o in offsets]


def test_explicit_accept_release_reject(admin, consumers):
    """ACCEPT: delivered once. RELEASE: delivered again with delivery count 2 (then accepted).
    REJECT: never delivered again."""
    topic, group = setup_group(admin, "rd-explicit")
    values = ["accept", "release", "reject", "accept-2"]
    offsets = dict(zip(values, admin.produce(topic, values), strict=True))

    def how(g: Got) -> AcknowledgeType:
        if g.value == "release" and g.delivery_count == 1:
            return AcknowledgeType.RELEASE
        return AcknowledgeType.REJECT if g.value == "reject" else AcknowledgeType.ACCEPT

    c = consumers(group, topic, share_acknowledgement_mode="explicit")
    got = poll_until(c, lambda g: sum(x.value == "release" for x in g) >= 2, ack=how)
    results = c.commit_sync(30)
    assert all(err is None for err in results.values()), results
    admin.produce(topic, ["marker"])
    got += poll_until(c, has("marker"), ack=how)
    assert [(g.offset, g.delivery_count) for g in got if g.value == "release"] == [
        (offsets["release"], 1), (offsets["release"], 2)]
    for value in ("accept", "reject", "accept-2"):
        assert [(g.offset, g.delivery_count) for g in got if g.value == value] == [
            (offsets[value], 1)], value


def test_several_consumers_on_one_partition(admin, consumers):
    """Three members on a 1-partition topic all get records, and each record goes to exactly
    one of them, once."""
    topic, group = setup_group(admin, "rd-several")
    members = [consumers(group, topic, max_poll_records=2) for _ in range(3)]
    produced: list[int] = []
    got: dict[int, list[Got]] = {i: [] for i in range(3)}
    deadline = time.monotonic() + WAIT
    # Records arrive one batch at a time while all three poll in turn (a member holds what its
    # last poll returned until its next poll, so the others get the next batches).
    while not all(got.values()) or sum(map(len, got.values())) < len(produced):
        assert time.monotonic() < deadline, f"not every member got records: {got}"
        produced += admin.produce(topic, [f"r{len(produced)}"])
        for i, c in enumerate(members):
            got[i] += [Got(m.offset(), m.delivery_count(), m.value().decode())
                       for m in c.poll(0.2) if m.error() is None]
    everything = [g for gs in got.values() for g in gs]
    assert sorted(g.offset for g in everything) == sorted(produced), "each record exactly once"
    assert {g.delivery_count for g in everything} == {1}


def test_close_releases_held_records(admin, consumers):
    """close() in explicit mode with records polled but not acknowledged: they go back at once
    (well before the 30 s acquisition lock), to the next member, with delivery count 2."""
    topic, group = setup_group(admin, "rd-close")
    offsets = admin.produce(topic, ["a", "b", "c"])
    holder = consumers(group, topic, share_acknowledgement_mode="explicit")
    held: list[Got] = []
    deadline = time.monotonic() + WAIT
    while len(held) < 3:  # poll only once per batch: nothing is acknowledged
        assert time.monotonic() < deadline, held
        held += [Got(m.offset(), m.delivery_count(), m.value().decode())
                 for m in holder.poll(0.5) if m.error() is None]
    closed_at = time.monotonic()
    holder.close()
    other = consumers(group, topic)
    got = poll_until(other, lambda g: len(g) >= 3, timeout=20.0)
    assert [(g.offset, g.delivery_count) for g in got] == [(o, 2) for o in offsets]
    assert time.monotonic() - closed_at < 20.0


def test_acknowledgements_in_close_are_kept(admin, consumers):
    """Explicit acknowledgements not yet committed go out with close(): the accepted records are
    never delivered again. (close() sends them alongside its leaving heartbeat; Strom once ended
    the member's share sessions on that heartbeat and refused them, about one close in four.)"""
    for round_ in range(5):
        topic, group = setup_group(admin, f"rd-close-ack{round_}")
        admin.produce(topic, ["a", "b", "c"])
        c = consumers(group, topic, share_acknowledgement_mode="explicit")
        poll_until(c, lambda g: len(g) >= 3, ack=lambda g: AcknowledgeType.ACCEPT)
        c.close()
        other = consumers(group, topic)
        (marker,) = admin.produce(topic, ["marker"])
        got = poll_until(other, has("marker"))
        assert [(g.offset, g.delivery_count) for g in got] == [(marker, 1)], f"round {round_}"
