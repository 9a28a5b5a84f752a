"""KIP-848 online migration: a live classic group upgraded to a consumer group and back."""

from __future__ import annotations

import uuid

import pytest

from strom.coordinator.group import consumer_protocol as cp
from strom.coordinator.group.replies import LeaveResult
from strom.coordinator.group.state import (
    ClassicGroup,
    ClassicState,
    ConsumerGroup,
    MemberState,
)
from strom.protocol.errors import ErrorCode as E
from strom.protocol.errors import KafkaError, ProtocolError

TOPIC = "t"


# -- the embedded consumer protocol ----------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_round_trip_every_version(version):
    raw = cp.encode_subscription(["a", "b"], {"a": [0, 2]}, version=version, rack_id="r1")
    sub = cp.parse_subscription(raw)
    assert (sub.version, sub.topics) == (version, ["a", "b"])
    assert sub.owned_partitions == ({"a": [0, 2]} if version >= 1 else {})
    assert sub.rack_id == ("r1" if version >= 3 else None)
    assert cp.subscription_version(raw) == version


def test_assignment_round_trip_and_malformed_bytes():
    raw = cp.encode_assignment({"a": [1, 3], "b": [0]}, 7)  # newer versions are written as v3
    assert cp.subscription_version(raw) == 3
    parsed = cp.parse_assignment(raw)
    assert parsed.partitions == {"a": [1, 3], "b": [0]} and parsed.user_data is None
    assert cp.parse_assignment(b"").partitions == {}
    with pytest.raises(ProtocolError):
        cp.parse_assignment(raw[:-6])
    with pytest.raises(ProtocolError):
        cp.parse_subscription(b"\x00\x01\x00\x00\x00\x05\x00")


# -- helpers: classic members speaking real consumer-protocol bytes --------------------------


class ClassicClient:
    """An eager classic consumer (range): revokes everything before rejoining."""

    def __init__(self, env, h, group, *, version=1, session=10000):
        self.env, self.h, self.group = env, h, group
        self.version, self.session = version, session
        self.member_id = ""
        self.generation = -1
        self.owned: set[int] = set()
        self.cooperative = False

    def protocols(self):
        owned = {TOPIC: sorted(self.owned)} if self.cooperative and self.owned else {}
        return [("range", cp.encode_subscription([TOPIC], owned, version=self.version))]

    def join(self):
        """Send a JoinGroup; returns the Reply (possibly parked in a classic group)."""
        if not self.cooperative:
            self.owned = set()
        reply = self.h.Reply()
        self.env.coordinator.classic.join_group(
            self.h.join_req(self.group, self.member_id, protocols=self.protocols(),
                            session=self.session), reply)
        if reply.done and reply.value.error_code == E.MEMBER_ID_REQUIRED:
            self.member_id = reply.value.member_id
            reply = self.h.Reply()
            self.env.coordinator.classic.join_group(
                self.h.join_req(self.group, self.member_id, protocols=self.protocols(),
                                session=self.session), reply)
        return reply

    def joined(self, reply):
        r = reply.value
        assert r.error_code == 0, r
        self.member_id, self.generation = r.member_id, r.generation_id
        return r

    def sync(self, assignments=()):
        reply = self.h.Reply()
        self.env.coordinator.classic.sync_group(self.group, self.generation, self.member_id, None,
                                                "consumer", "range", list(assignments), reply)
        return reply

    def synced(self, reply):
        r = reply.value
        assert r.error_code == 0, r
        self.owned = set(cp.parse_assignment(r.assignment).partitions.get(TOPIC, []))
        return r

    def heartbeat(self):
        return self.env.coordinator.classic.heartbeat(self.group, self.generation,
                                                      self.member_id, None)

    def rejoin_and_sync(self):
        self.joined(self.join())
        self.synced(self.sync())

    def poll(self):
        """What the client does on its heartbeat thread: rejoin when told to."""
        if self.heartbeat() == E.REBALANCE_IN_PROGRESS:
            self.rejoin_and_sync()


class ConsumerClient:
    """A KIP-848 consumer that applies every assignment at once."""

    def __init__(self, env, group):
        self.env, self.group = env, group
        self.member_id = uuid.uuid4().hex
        self.epoch = 0
        self.owned: set[int] = set()
        self.topic_id = env.topics.topic(TOPIC)[0]

    def heartbeat(self):
        join = self.epoch == 0
        r = self.env.coordinator.consumer.consumer_group_heartbeat(
            group_id=self.group, member_id=self.member_id, member_epoch=self.epoch,
            instance_id=None, rack_id=None, rebalance_timeout=30000 if join else -1,
            subscribed_topic_names=[TOPIC] if join else None, subscribed_topic_regex=None,
            server_assignor=None,
            topic_partitions=[{"topic_id": self.topic_id, "partitions": sorted(self.owned)}]
            if self.owned else [],
            client_id="c", client_host="/h")
        if r.error_code == 0:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.owned = {p for _, ps in r.assignment for p in ps}
        return r

    def leave(self):
        self.owned = set()
        return self.env.coordinator.consumer.consumer_group_heartbeat(
            group_id=self.group, member_id=self.member_id, member_epoch=-1, instance_id=None,
            rack_id=None, rebalance_timeout=-1, subscribed_topic_names=None,
            subscribed_topic_regex=None, server_assignor=None, topic_partitions=None,
            client_id="c", client_host="/h")


def assert_exclusive(clients):
    seen: dict[int, object] = {}
    for c in clients:
        for p in c.owned:
            assert p not in seen, f"partition {p} owned twice"
            seen[p] = c


def classic_group(env, h, group, n=2, partitions=6, **kw):
    """n eager classic members sharing `partitions` partitions of TOPIC, stable."""
    env.topics.add(TOPIC, partitions)
    clients = [ClassicClient(env, h, group, **kw) for _ in range(n)]
    replies = [c.join() for c in clients]
    env.loop.advance(0)
    for c, r in zip(clients, replies, strict=True):
        c.joined(r)
    leader = next(c for c in clients if c.member_id == replies[0].value.leader)
    shares = {c.member_id: list(range(partitions))[i::n] for i, c in enumerate(clients)}
    plan = [(mid, cp.encode_assignment({TOPIC: ps}, 1)) for mid, ps in shares.items()]
    syncs = {c: c.sync(plan if c is leader else ()) for c in sorted(clients,
                                                                     key=lambda c: c is not leader)}
    for c, r in syncs.items():
        c.synced(r)
    assert isinstance(env.coordinator.group(group), ClassicGroup)
    return clients


def drive(clients, rounds=6):
    for _ in range(rounds):
        for c in clients:
            if isinstance(c, ClassicClient):
                c.poll()
            else:
                c.heartbeat()
            assert_exclusive(clients)


# -- upgrade ---------------------------------------------------------------------------------


def test_first_consumer_member_upgrades_a_live_classic_group(env, h):
    a, b = classic_group(env, h, "g")
    generation = a.generation
    c = ConsumerClient(env, "g")
    r = c.heartbeat()
    assert r.error_code == 0
    group = env.coordinator.group("g")
    assert isinstance(group, ConsumerGroup)
    # the classic members keep what they own, at epoch = the classic generation
    for m in (a, b):
        member = group.members[m.member_id]
        assert member.classic is not None and member.member_epoch == generation
        assert member.assigned == {c.topic_id: m.owned}
    assert group.group_epoch == generation + 1  # the new member's subscription
    assert c.owned == set()  # everything is still owned by the classic members
    # the classic members are told to rejoin, then the new member gets its share
    assert a.heartbeat() == E.REBALANCE_IN_PROGRESS
    drive([a, b, c])
    assert sorted(len(x.owned) for x in (a, b, c)) == [2, 2, 2]
    assert a.owned | b.owned | c.owned == set(range(6))
    assert a.generation == group.group_epoch == b.generation
    assert a.heartbeat() == E.NONE
    described = env.coordinator.consumer.consumer_group_describe(
        ["g"], include_authorized_operations=False)
    types = {m.member_id: m.member_type for m in described[0].members}
    assert types == {a.member_id: 0, b.member_id: 0, c.member_id: 1}
    listed = env.coordinator.list_groups()[1]
    assert [(g.group_type, g.protocol_type) for g in listed] == [("consumer", "consumer")]
    # the classic DescribeGroups does not describe it any more (Kafka: not a classic group)
    (v6,) = env.coordinator.classic.describe_groups(["g"], include_authorized_operations=False,
                                                    version=6)
    (v5,) = env.coordinator.classic.describe_groups(["g"], include_authorized_operations=False,
                                                    version=5)
    assert (v6.error_code, v6.group_state) == (E.GROUP_ID_NOT_FOUND, "Dead")
    assert (v5.error_code, v5.group_state, v5.members) == (0, "Dead", ())


def test_classic_member_commits_with_its_member_epoch(env, h):
    a, b = classic_group(env, h, "g")
    c = ConsumerClient(env, "g")
    c.heartbeat()
    drive([a, b, c])
    assert h.commit(env.coordinator, "g", {(TOPIC, 0): 5}, generation=a.generation,
                    member=a.member_id, version=2) == {(TOPIC, 0): E.NONE}
    with pytest.raises(KafkaError) as err:
        h.commit(env.coordinator, "g", {(TOPIC, 0): 6}, generation=a.generation - 1,
                 member=a.member_id, version=8)
    assert err.value.code == E.ILLEGAL_GENERATION
    assert h.fetched(env.coordinator, "g", [(TOPIC, [0])]) == {(TOPIC, 0): 5}
    assert h.fetched(env.coordinator, "g", [(TOPIC, [0])], member_id=a.member_id,
                     member_epoch=a.generation) == {(TOPIC, 0): 5}
    with pytest.raises(KafkaError) as err:
        h.fetched(env.coordinator, "g", [(TOPIC, [0])], member_id=a.member_id,
                  member_epoch=a.generation + 1)
    assert err.value.code == E.ILLEGAL_GENERATION


def test_classic_requests_to_the_consumer_group_are_validated(env, h):
    a, _ = classic_group(env, h, "g")
    c = ConsumerClient(env, "g")
    c.heartbeat()
    coord = env.coordinator
    assert coord.classic.heartbeat("g", a.generation + 1, a.member_id, None) == E.ILLEGAL_GENERATION
    assert coord.classic.heartbeat("g", a.generation, "nobody", None) == E.UNKNOWN_MEMBER_ID
    # a consumer-protocol member cannot use the classic APIs
    assert coord.classic.heartbeat("g", c.epoch, c.member_id, None) == E.UNKNOWN_MEMBER_ID
    reply = h.Reply()
    coord.classic.sync_group("g", a.generation, a.member_id, None, "consumer", "roundrobin", [],
                             reply)
    assert reply.value.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    # a stale member must rejoin before syncing
    reply = h.Reply()
    coord.classic.sync_group("g", a.generation, a.member_id, None, "consumer", "range", [], reply)
    assert reply.value.error_code == E.REBALANCE_IN_PROGRESS
    # a joining member with another assignor cannot join
    other = h.Reply()
    coord.classic.join_group(
        h.join_req("g", protocols=[("roundrobin", cp.encode_subscription([TOPIC]))]), other)
    assert other.value.error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_a_cooperative_classic_member_revokes_before_the_new_owner_takes(env, h):
    a, b = classic_group(env, h, "g")
    a.cooperative = b.cooperative = True
    c = ConsumerClient(env, "g")
    c.heartbeat()
    old = a.generation
    assert a.heartbeat() == E.REBALANCE_IN_PROGRESS
    r = a.joined(a.join())  # still owns everything: must revoke first, epoch unchanged
    assert r.generation_id == old
    group = env.coordinator.group("g")
    assert group.members[a.member_id].state == MemberState.UNREVOKED_PARTITIONS
    kept = set(a.owned)
    a.synced(a.sync())
    assert a.owned < kept  # the sync hands out only what it keeps
    a.rejoin_and_sync()  # reports the smaller set: now at the new epoch
    assert a.generation == group.group_epoch
    drive([a, b, c])
    assert sorted(len(x.owned) for x in (a, b, c)) == [2, 2, 2]


def test_upgrade_survives_a_restart(env, h):
    a, b = classic_group(env, h, "g")
    c = ConsumerClient(env, "g")
    c.heartbeat()
    drive([a, b, c])
    env.restart()
    group = env.coordinator.group("g")
    assert isinstance(group, ConsumerGroup)
    assert {m for m, x in group.members.items() if x.classic is not None} == {a.member_id,
                                                                             b.member_id}
    assert group.members[a.member_id].classic.session_timeout == 10000
    assert a.heartbeat() == E.NONE


def test_upgrade_refused_when_the_policy_disables_it(env, h):
    env.config.migration_policy = "downgrade"
    env.coordinator = env.new_coordinator()
    a, b = classic_group(env, h, "g")
    r = ConsumerClient(env, "g").heartbeat()
    assert r.error_code == E.GROUP_ID_NOT_FOUND
    assert "online upgrade is disabled" in r.error_message
    assert isinstance(env.coordinator.group("g"), ClassicGroup)
    assert a.heartbeat() == E.NONE and b.heartbeat() == E.NONE


def test_custom_assignor_user_data_blocks_the_upgrade_and_the_group_stays_classic(env, h):
    env.topics.add(TOPIC, 2)
    a = ClassicClient(env, h, "g")
    reply = a.join()
    env.loop.advance(0)
    a.joined(reply)
    user_data = cp.encode_assignment({TOPIC: [0, 1]}, 1)[:-4] + b"\x00\x00\x00\x02ud"
    a.synced(a.sync([(a.member_id, user_data)]))
    r = ConsumerClient(env, "g").heartbeat()
    assert r.error_code == E.GROUP_ID_NOT_FOUND and "custom assignor" in r.error_message
    assert isinstance(env.coordinator.group("g"), ClassicGroup)
    assert a.heartbeat() == E.NONE


# -- classic members joining a consumer group, and downgrade ---------------------------------


def test_last_consumer_member_leaving_downgrades_to_a_classic_group(env, h):
    a, b = classic_group(env, h, "g")
    c = ConsumerClient(env, "g")
    c.heartbeat()
    drive([a, b, c])
    epoch = env.coordinator.group("g").group_epoch
    assert c.leave().error_code == 0
    group = env.coordinator.group("g")
    assert isinstance(group, ClassicGroup)
    assert group.state == ClassicState.PREPARING_REBALANCE and group.generation == epoch
    assert set(group.members) == {a.member_id, b.member_id}
    # the classic members rejoin a classic rebalance with a leader
    ra, rb = a.join(), b.join()
    ra, rb = a.joined(ra), b.joined(rb)
    assert ra.generation_id == rb.generation_id == epoch + 1
    leader = a if ra.leader == a.member_id else b
    plan = [(a.member_id, cp.encode_assignment({TOPIC: [0, 1, 2]}, 1)),
            (b.member_id, cp.encode_assignment({TOPIC: [3, 4, 5]}, 1))]
    follower = b if leader is a else a
    fs = follower.sync()
    leader.synced(leader.sync(plan))
    follower.synced(fs)
    assert a.owned == {0, 1, 2} and b.owned == {3, 4, 5}
    env.restart()
    assert isinstance(env.coordinator.group("g"), ClassicGroup)


def test_downgrade_refused_by_the_policy_keeps_the_consumer_group(env, h):
    env.config.migration_policy = "upgrade"
    env.coordinator = env.new_coordinator()
    a, b = classic_group(env, h, "g")
    c = ConsumerClient(env, "g")
    c.heartbeat()
    drive([a, b, c])
    c.leave()
    assert isinstance(env.coordinator.group("g"), ConsumerGroup)
    drive([a, b])  # the classic members share everything through the consumer group
    assert sorted(len(x.owned) for x in (a, b)) == [3, 3]


def test_classic_member_joins_a_consumer_group_and_leaving_it_removes_it(env, h):
    env.topics.add(TOPIC, 4)
    c = ConsumerClient(env, "g")
    c.heartbeat()
    assert c.owned == {0, 1, 2, 3}
    a = ClassicClient(env, h, "g")
    r = a.joined(a.join())  # answered at once: no leader, no member list
    assert r.leader == "" and r.members == () and r.protocol_name == "range"
    a.synced(a.sync())
    drive([a, c])
    assert sorted(len(x.owned) for x in (a, c)) == [2, 2]
    left = env.coordinator.classic.leave_group("g", [(a.member_id, None, None)])
    assert left == (E.NONE, [LeaveResult(a.member_id, None, error_code=0)])
    assert isinstance(env.coordinator.group("g"), ConsumerGroup)
    drive([c])
    assert c.owned == {0, 1, 2, 3}


def test_classic_join_refused_when_migration_is_disabled(env, h):
    env.config.migration_policy = "disabled"
    env.coordinator = env.new_coordinator()
    env.topics.add(TOPIC, 2)
    ConsumerClient(env, "g").heartbeat()
    reply = ClassicClient(env, h, "g").join()
    assert reply.value.error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_classic_member_that_never_rejoins_is_fenced(env, h):
    a, b = classic_group(env, h, "g")
    c = ConsumerClient(env, "g")
    c.heartbeat()
    assert a.heartbeat() == E.REBALANCE_IN_PROGRESS  # starts a's rejoin deadline (30 s)
    for _ in range(4):
        env.loop.advance(8000)
        b.poll()
        c.heartbeat()
    group = env.coordinator.group("g")
    assert a.member_id not in group.members and b.member_id in group.members


def test_static_classic_member_replacing_the_last_consumer_member_downgrades(env, h):
    env.topics.add(TOPIC, 4)
    c = ConsumerClient(env, "g")
    r = env.coordinator.consumer.consumer_group_heartbeat(
        group_id="g", member_id=c.member_id, member_epoch=0, instance_id="i1", rack_id=None,
        rebalance_timeout=30000, subscribed_topic_names=[TOPIC], subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=[], client_id="c", client_host="/h")
    assert r.error_code == 0
    a = ClassicClient(env, h, "g")
    a.rejoin_and_sync()
    group = env.coordinator.group("g")
    assert isinstance(group, ConsumerGroup) and len(group.members) == 2
    # the static consumer-protocol instance restarts as a classic consumer
    r = env.coordinator.consumer.consumer_group_heartbeat(
        group_id="g", member_id=c.member_id, member_epoch=-2, instance_id="i1", rack_id=None,
        rebalance_timeout=-1, subscribed_topic_names=None, subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=None, client_id="c", client_host="/h")
    assert r.error_code == 0
    reply = h.Reply()
    env.coordinator.classic.join_group(h.join_req("g", instance="i1", protocols=a.protocols()),
                                       reply)
    group = env.coordinator.group("g")
    assert isinstance(group, ClassicGroup) and group.state == ClassicState.PREPARING_REBALANCE
    assert group.static_member_id("i1") in group.members and len(group.members) == 2
    assert not reply.done  # parked in the classic rebalance
    other = a.join()
    assert reply.value.error_code == 0 and other.value.error_code == 0
    assert reply.value.generation_id == other.value.generation_id
    env.restart()
    assert isinstance(env.coordinator.group("g"), ClassicGroup)


def test_upgrade_answers_parked_classic_requests_with_rebalance_in_progress(env, h):
    a, b = classic_group(env, h, "g")
    parked = a.join()  # the leader rejoins: a classic rebalance starts, a's join waits for b
    assert not parked.done
    c = ConsumerClient(env, "g")
    assert c.heartbeat().error_code == 0
    assert parked.value.error_code == E.REBALANCE_IN_PROGRESS
    assert isinstance(env.coordinator.group("g"), ConsumerGroup)
    a.rejoin_and_sync()
    drive([a, b, c])
    assert sorted(len(x.owned) for x in (a, b, c)) == [2, 2, 2]
