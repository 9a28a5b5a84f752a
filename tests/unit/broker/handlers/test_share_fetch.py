"""ShareFetch and ShareAcknowledge (KIP-932) through the broker: acquiring, acknowledging,
redelivery, several members on one partition, share sessions and the errors Kafka defines."""

from __future__ import annotations

import time
import uuid

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.record import decode_records, iter_batches

GROUP = "queue"
ACCEPT, RELEASE, REJECT = 1, 2, 3


class Member:
    """One share consumer speaking the raw protocol: its member id and session epoch."""

    def __init__(self, h, topic_id: uuid.UUID) -> None:
        self.h, self.topic_id = h, topic_id
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        r = h.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
            "group_id": GROUP, "member_id": self.member_id, "member_epoch": 0,
            "rack_id": None, "subscribed_topic_names": ["jobs"]})
        assert r.error_code == 0

    def _next_epoch(self) -> int:
        epoch = self.epoch
        self.epoch += 1
        return epoch

    def fetch(self, acks: list[tuple[int, int, list[int]]] = (), *, max_records: int = 500,
              epoch: int | None = None, mode: int = 0, max_bytes: int = 1 << 20):
        r = self.h.request(ApiKey.SHARE_FETCH, 2, {
            "group_id": GROUP, "member_id": self.member_id,
            "share_session_epoch": self._next_epoch() if epoch is None else epoch,
            "max_wait": 0, "min_bytes": 1, "max_bytes": max_bytes, "max_records": max_records,
            "batch_size": max_records, "share_acquire_mode": mode, "is_renew_ack": False,
            "topics": [{"topic_id": self.topic_id, "partitions": [
                {"partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": f, "last_offset": last, "acknowledge_types": t}
                    for f, last, t in acks]}]}],
            "forgotten_topics_data": []})
        return r

    def acknowledge(self, acks: list[tuple[int, int, list[int]]], *, epoch: int | None = None):
        return self.h.request(ApiKey.SHARE_ACKNOWLEDGE, 2, {
            "group_id": GROUP, "member_id": self.member_id,
            "share_session_epoch": self._next_epoch() if epoch is None else epoch,
            "is_renew_ack": False,
            "topics": [{"topic_id": self.topic_id, "partitions": [
                {"partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": f, "last_offset": last, "acknowledge_types": t}
                    for f, last, t in acks]}]}]})


def _acquired(r) -> list[tuple[int, int, int]]:
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in r.responses for p in t.partitions for a in p.acquired_records]


def _values(r) -> list[bytes]:
    out = []
    for t in r.responses:
        for p in t.partitions:
            data = bytes(p.records)
            for pos, h in iter_batches(data):
                out += [rec.value for rec in decode_records(data[pos:pos + h.size])]
    return out


def _setup(h) -> uuid.UUID:
    h.create_topic("jobs", partitions=1)
    r = h.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [GROUP]})
    assert r.coordinators[0].error_code == 0
    return h.topic_id("jobs")


def test_acquire_acknowledge_and_redeliver(broker_harness) -> None:
    h = broker_harness
    a = Member(h, _setup(h))
    first = a.fetch()  # opens the session; the share partition starts at the log end (latest)
    assert first.error_code == 0 and _acquired(first) == []
    assert first.acquisition_lock_timeout == 30000
    assert h.produce("jobs", 0, h.batch(*[b"v%d" % i for i in range(10)])).error_code == 0
    r = a.fetch()
    assert _acquired(r) == [(0, 9, 1)]
    assert _values(r) == [b"v%d" % i for i in range(10)]
    ack = a.acknowledge([(0, 4, [ACCEPT]), (5, 9, [RELEASE])])
    assert ack.error_code == 0
    assert ack.responses[0].partitions[0].error_code == 0
    again = a.fetch()
    assert _acquired(again) == [(5, 9, 2)]
    # piggy-backed acknowledgements: reject 5, accept the rest; nothing is left to hand out
    done = a.fetch([(5, 9, [REJECT, ACCEPT, ACCEPT, ACCEPT, ACCEPT])])
    assert done.responses[0].partitions[0].acknowledge_error_code == 0
    assert _acquired(done) == []
    held = next(iter(h.broker.share_partitions.in_flight(GROUP)))
    assert held.partition.start_offset == 10


def test_acknowledging_what_was_not_acquired_is_refused(broker_harness) -> None:
    h = broker_harness
    a = Member(h, _setup(h))
    a.fetch()
    h.produce("jobs", 0, h.batch(b"a", b"b", b"c"))
    assert _acquired(a.fetch()) == [(0, 2, 1)]
    assert a.acknowledge([(2, 2, [ACCEPT])]).responses[0].partitions[0].error_code == 0
    again = a.acknowledge([(2, 2, [ACCEPT])])  # already acknowledged
    assert again.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
    beyond = a.acknowledge([(7, 8, [ACCEPT])])  # never fetched: past the in-flight records
    assert beyond.responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
    other = Member(h, a.topic_id)
    other.fetch()
    stolen = other.acknowledge([(1, 1, [ACCEPT])])  # held by a, not by other
    assert stolen.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
    bad_type = a.acknowledge([(1, 1, [9])])
    assert bad_type.responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST


def test_members_on_one_partition_get_different_records(broker_harness) -> None:
    h = broker_harness
    topic_id = _setup(h)
    a, b = Member(h, topic_id), Member(h, topic_id)
    a.fetch(), b.fetch()
    for i in range(4):
        h.produce("jobs", 0, h.batch(b"x%d" % i))
    got_a = _acquired(a.fetch(max_records=2, mode=1))
    got_b = _acquired(b.fetch(max_records=2, mode=1))
    offsets_a = {o for f, last, _ in got_a for o in range(f, last + 1)}
    offsets_b = {o for f, last, _ in got_b for o in range(f, last + 1)}
    assert offsets_a | offsets_b == {0, 1, 2, 3} and not offsets_a & offsets_b
    # a leaves its session: what it held goes to b
    close = a.fetch(epoch=-1)
    assert close.error_code == 0
    redelivered = _acquired(b.fetch())
    assert {o for f, last, _ in redelivered for o in range(f, last + 1)} == offsets_a
    assert all(count == 2 for _, _, count in redelivered)


def test_a_large_max_bytes_reads_only_what_can_be_acquired(broker_harness, monkeypatch) -> None:
    """A client's 50 MiB max_bytes over a long backlog: the broker reads the log up to the batch
    that completes max_records (new records) or the in-flight window's end (released ones in
    the middle), not 50 MiB of it."""
    from strom.storage.files import FileSlice

    h = broker_harness
    a = Member(h, _setup(h))
    a.fetch()
    for i in range(40):  # 40 batches of 100 records, 4,000 offsets: twice the window of 2,000
        value = b"%04d" % i + bytes(1000)
        assert h.produce("jobs", 0, h.batch(*[value] * 100)).error_code == 0
    batch_bytes = len(h.batch(*[bytes(1004)] * 100))
    read: list[int] = []
    original = FileSlice.read_bytes
    monkeypatch.setattr(FileSlice, "read_bytes",
                        lambda self: read.append(self.length) or original(self))
    r = a.fetch(max_records=500, max_bytes=50 << 20)
    assert _acquired(r) == [(0, 499, 1)]
    assert len(_values(r)) == 500 and sum(read) <= 6 * batch_bytes
    b = Member(h, a.topic_id)
    assert _acquired(b.fetch(max_records=500, max_bytes=50 << 20)) == [(500, 999, 1)]
    assert a.acknowledge([(100, 199, [RELEASE])]).error_code == 0
    read.clear()
    # released records in the middle: read as far as the window may reach (offset 2,000)
    got = _acquired(b.fetch(max_records=1000, max_bytes=50 << 20))
    assert got == [(100, 199, 2), (1000, 1899, 1)]
    assert sum(read) <= 20 * batch_bytes


def test_share_session_errors(broker_harness) -> None:
    h = broker_harness
    a = Member(h, _setup(h))
    assert a.fetch(epoch=3).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert a.acknowledge([], epoch=0).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert a.fetch(epoch=0).error_code == 0
    assert a.fetch(epoch=5).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert a.fetch(epoch=1).error_code == 0


def test_a_closed_connection_releases_its_members_records(broker_harness) -> None:
    """Kafka 4.4 releases a crashed consumer's records when its connection drops, without
    waiting for their acquisition locks to expire."""
    h = broker_harness
    a = Member(h, _setup(h))
    a.fetch()
    h.produce("jobs", 0, h.batch(b"p", b"q"))
    assert _acquired(a.fetch()) == [(0, 1, 1)]
    h.conn.close()
    assert a.fetch().error_code == ErrorCode.SHARE_SESSION_NOT_FOUND  # the session ended too
    b = Member(h, a.topic_id)
    assert _acquired(b.fetch()) == [(0, 1, 2)]


def _group_configs(h, configs: dict[str, str]) -> None:
    r = h.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": 32, "resource_name": GROUP, "configs": [
            {"name": k, "config_operation": 0, "value": v} for k, v in configs.items()]}],
        "validate_only": False})
    assert r.responses[0].error_code == 0, r.responses[0].error_message


def _dead_letters(h, topic: str) -> list:
    plog = h.broker.partitions.get(topic, 0)
    data = plog.read(0, 1 << 20, max_offset=plog.high_watermark).slice
    if data is None:
        return []
    raw = data.read_bytes()
    return [r for pos, b in iter_batches(raw) for r in decode_records(raw[pos:pos + b.size])]


def test_rejected_and_exhausted_records_go_to_the_dead_letter_topic(broker_harness) -> None:
    h = broker_harness
    topic_id = _setup(h)
    h.create_topic("dlq.jobs", configs={"errors.deadletterqueue.group.enable": "true"})
    _group_configs(h, {"errors.deadletterqueue.topic.name": "dlq.jobs",
                       "errors.deadletterqueue.copy.record.enable": "true",
                       "share.delivery.count.limit": "2"})
    a = Member(h, topic_id)
    a.fetch()
    h.produce("jobs", 0, h.batch(b"ok", b"poison", b"flaky", key=b"k"))
    assert _acquired(a.fetch()) == [(0, 2, 1)]
    a.acknowledge([(0, 2, [ACCEPT, REJECT, RELEASE])])
    assert _acquired(a.fetch()) == [(2, 2, 2)]
    a.acknowledge([(2, 2, [RELEASE])])  # the second delivery was the last
    letters = _dead_letters(h, "dlq.jobs")
    assert [(r.key, r.value) for r in letters] == [(b"k", b"poison"), (b"k", b"flaky")]
    headers = [dict(r.headers) for r in letters]
    assert headers[0] == {"__dlq.errors.topic": b"jobs", "__dlq.errors.partition": b"0",
                          "__dlq.errors.offset": b"1", "__dlq.errors.group": GROUP.encode(),
                          "__dlq.errors.delivery.count": b"1",
                          "__dlq.errors.message": b"Offset rejected by client."}
    assert headers[1]["__dlq.errors.delivery.count"] == b"2"
    assert headers[1]["__dlq.errors.message"] == b"Offset delivery count exceeded the threshold."
    held = next(iter(h.broker.share_partitions.in_flight(GROUP)))
    assert held.partition.start_offset == 3  # archived once written


def test_deleting_the_group_deletes_its_share_state(broker_harness) -> None:
    h = broker_harness
    a = Member(h, _setup(h))
    a.fetch()
    h.produce("jobs", 0, h.batch(b"1", b"2"))
    a.fetch()
    a.acknowledge([(0, 1, [ACCEPT])])
    key = next(iter(h.broker.share_partitions.in_flight(GROUP))).key
    assert h.broker.share_coordinator.state(key).start_offset == 2
    h.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
        "group_id": GROUP, "member_id": a.member_id, "member_epoch": -1, "rack_id": None,
        "subscribed_topic_names": None})
    r = h.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": [GROUP]})
    assert r.results[0].error_code == 0
    assert h.broker.share_coordinator.state(key) is None
    assert not h.broker.share_partitions.in_flight(GROUP)


def test_a_redelivery_delay_holds_released_records_back(broker_harness) -> None:
    """Strom's extension: share.redelivery.delay.ms keeps a released record from the next
    fetch until the delay has passed."""
    h = broker_harness
    topic_id = _setup(h)
    _group_configs(h, {"share.redelivery.delay.ms": "300"})
    a = Member(h, topic_id)
    a.fetch()
    h.produce("jobs", 0, h.batch(b"later"))
    assert _acquired(a.fetch()) == [(0, 0, 1)]
    a.acknowledge([(0, 0, [RELEASE])])
    assert _acquired(a.fetch()) == []  # held back
    deadline = time.monotonic() + 10
    while not (got := _acquired(a.fetch())):
        assert time.monotonic() < deadline, "the released record never came back"
        h.run(0.05)
    assert got == [(0, 0, 2)]


def _leave_group(h, member: Member) -> None:
    r = h.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
        "group_id": GROUP, "member_id": member.member_id, "member_epoch": -1, "rack_id": None,
        "subscribed_topic_names": None})
    assert r.error_code == 0


def test_acknowledgements_sent_after_leaving_the_group_count(broker_harness) -> None:
    """librdkafka's close() sends the leaving heartbeat and the final ShareAcknowledge (epoch
    -1, with the last acknowledgements) concurrently. As in Kafka, leaving the group does not
    end the member's share sessions, so the acknowledgements still apply: accepted records
    never come back, and what the member still held is released when its session closes."""
    h = broker_harness
    a = Member(h, _setup(h))
    a.fetch()
    h.produce("jobs", 0, h.batch(b"a", b"b", b"c"))
    assert _acquired(a.fetch()) == [(0, 2, 1)]
    _leave_group(h, a)
    final = a.acknowledge([(0, 1, [ACCEPT])], epoch=-1)
    assert final.error_code == 0
    assert final.responses[0].partitions[0].error_code == 0
    b = Member(h, a.topic_id)
    assert _acquired(b.fetch()) == [(2, 2, 2)]  # only the record a never acknowledged


def _reset_elsewhere(h, key, start: int) -> None:
    """What a group coordinator on another broker does for kafka-share-groups --reset-offsets:
    a new state epoch with the share coordinator, and nothing told to this leader."""
    persister = h.broker.share_persister
    summary = h.loop.run_until_complete(persister.read_summary(key))
    h.loop.run_until_complete(persister.initialize(key, summary.state_epoch + 1, start))


def test_the_groups_last_session_here_forgets_its_share_partitions(broker_harness) -> None:
    """As Kafka's onGroupEmpty: once no member of the group has a share session with this
    leader, its share partitions are read again from the share coordinator on the next fetch
    (an admin may have reset them through a group coordinator on another broker)."""
    h = broker_harness
    a = Member(h, _setup(h))
    a.fetch()
    h.produce("jobs", 0, h.batch(b"0", b"1", b"2"))
    assert _acquired(a.fetch()) == [(0, 2, 1)]
    b = Member(h, a.topic_id)
    b.fetch()
    a.acknowledge([(0, 0, [ACCEPT])])
    key = next(iter(h.broker.share_partitions.in_flight(GROUP))).key
    a.fetch(epoch=-1)  # leaves: 1-2 released; b still has a session here
    assert h.broker.share_partitions.in_flight(GROUP)
    b.fetch(epoch=-1)
    assert not h.broker.share_partitions.in_flight(GROUP)
    deadline = time.monotonic() + 10
    while h.broker.share_partitions.pending_writes:  # the release is written in the background
        assert time.monotonic() < deadline, "the release was never written"
        h.run(0.01)
    _reset_elsewhere(h, key, 0)
    c = Member(h, a.topic_id)
    assert _acquired(c.fetch()) == [(0, 2, 1)]


def test_a_fenced_state_write_forgets_the_share_partition(broker_harness) -> None:
    h = broker_harness
    a = Member(h, _setup(h))
    a.fetch()
    h.produce("jobs", 0, h.batch(b"0", b"1"))
    assert _acquired(a.fetch()) == [(0, 1, 1)]
    key = next(iter(h.broker.share_partitions.in_flight(GROUP))).key
    _reset_elsewhere(h, key, 1)
    r = a.acknowledge([(0, 1, [ACCEPT])])
    assert r.responses[0].partitions[0].error_code == ErrorCode.FENCED_STATE_EPOCH
    assert not h.broker.share_partitions.in_flight(GROUP)
    assert _acquired(a.fetch()) == [(1, 1, 1)]  # the new state, read again
