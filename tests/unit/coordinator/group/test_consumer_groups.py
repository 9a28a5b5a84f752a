"""KIP-848 consumer groups: heartbeats, reconciliation, fencing, persistence."""

from __future__ import annotations

import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.coordinator.group.coordinator import GroupCoordinator
from strom.coordinator.group.group_configs import EffectiveGroupConfig, StaticGroupConfigs
from strom.coordinator.group.replies import DescribedTopic, HeartbeatReply
from strom.coordinator.group.state import ConsumerGroup, MemberState
from strom.protocol.errors import ErrorCode as E
from strom.protocol.errors import KafkaError


class Client:
    """A well-behaved consumer: applies every assignment at once and reports what it owns."""

    def __init__(self, env, group, topics=(), *, regex=None, member_id=None, instance=None,
                 rebalance=30000):
        self.env, self.group, self.topics, self.regex = env, group, list(topics), regex
        self.member_id = member_id or uuid.uuid4().hex
        self.instance = instance
        self.rebalance = rebalance
        self.epoch = 0
        self.owned: dict[uuid.UUID, set[int]] = {}
        self.last: HeartbeatReply | None = None

    def heartbeat(self, *, full=False, ack=True, epoch=None):
        join = self.epoch == 0
        r = self.env.coordinator.consumer.consumer_group_heartbeat(
            group_id=self.group, member_id=self.member_id,
            member_epoch=self.epoch if epoch is None else epoch, instance_id=self.instance,
            rack_id=None, rebalance_timeout=self.rebalance if join or full else -1,
            subscribed_topic_names=self.topics if join or full else None,
            subscribed_topic_regex=self.regex if join or full else None, server_assignor=None,
            topic_partitions=[{"topic_id": t, "partitions": sorted(ps)}
                              for t, ps in self.owned.items()] if (ack or join) else None,
            client_id="c", client_host="/h")
        self.last = r
        if r.error_code == 0:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.owned = {t: set(ps) for t, ps in r.assignment}
        return r

    def leave(self, epoch=-1):
        r = self.env.coordinator.consumer.consumer_group_heartbeat(
            group_id=self.group, member_id=self.member_id, member_epoch=epoch,
            instance_id=self.instance, rack_id=None, rebalance_timeout=-1,
            subscribed_topic_names=None, subscribed_topic_regex=None, server_assignor=None,
            topic_partitions=None, client_id="c", client_host="/h")
        self.owned = {}
        return r

    def partitions(self) -> set[tuple[uuid.UUID, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def settle(clients, rounds=6):
    for _ in range(rounds):
        for c in clients:
            c.heartbeat()
        assert_exclusive(clients)


def assert_exclusive(clients):
    seen: dict = {}
    for c in clients:
        for tp in c.partitions():
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {c.member_id}"
            seen[tp] = c.member_id


def group_of(env, gid) -> ConsumerGroup:
    g = env.coordinator.group(gid)
    assert isinstance(g, ConsumerGroup)
    return g


def test_single_member_gets_every_partition(env):
    t = env.topics.add("t", 4)
    a = Client(env, "g", ["t"])
    r = a.heartbeat()
    assert r.error_code == 0 and r.member_epoch == 1 and r.member_id == a.member_id
    assert r.heartbeat_interval == env.config.consumer_heartbeat_interval
    assert a.owned == {t: {0, 1, 2, 3}}
    r = a.heartbeat()
    assert r.assignment is None  # unchanged: not repeated
    g = group_of(env, "g")
    assert (g.group_epoch, g.assignment_epoch, g.state_name) == (1, 1, "Stable")


def test_partitions_move_only_after_revocation(env):
    t = env.topics.add("t", 4)
    a, b = Client(env, "g", ["t"]), Client(env, "g", ["t"])
    a.heartbeat()
    b.heartbeat()
    assert b.epoch == 2 and b.owned == {}  # all partitions still belong to a
    assert group_of(env, "g").members[b.member_id].state == MemberState.UNRELEASED_PARTITIONS
    r = a.heartbeat(ack=False)  # a learns it must give up two partitions
    assert r.member_epoch == 1 and len(a.owned[t]) == 2
    assert group_of(env, "g").members[a.member_id].state == MemberState.UNREVOKED_PARTITIONS
    b.heartbeat()
    assert b.owned == {}  # nothing yet: a has not confirmed the revocation
    a.heartbeat()  # a reports it owns only its two partitions now
    assert a.epoch == 2
    b.heartbeat()
    assert b.epoch == 2 and len(b.owned[t]) == 2
    assert_exclusive([a, b])
    assert a.partitions() | b.partitions() == {(t, p) for p in range(4)}
    assert group_of(env, "g").state_name == "Stable"


def test_three_members_and_a_leave(env):
    t = env.topics.add("t", 6)
    clients = [Client(env, "g", ["t"]) for _ in range(3)]
    settle(clients)
    assert sorted(len(c.owned.get(t, ())) for c in clients) == [2, 2, 2]
    r = clients[2].leave()
    assert r.error_code == 0 and r.member_epoch == -1
    settle(clients[:2])
    assert sorted(len(c.owned.get(t, ())) for c in clients[:2]) == [3, 3]
    assert clients[0].partitions() | clients[1].partitions() == {(t, p) for p in range(6)}


def test_silent_member_is_fenced_after_the_session_timeout(env):
    env.topics.add("t", 4)
    a, b = Client(env, "g", ["t"]), Client(env, "g", ["t"])
    settle([a, b])
    for _ in range(3):
        env.loop.advance(4000)
        a.heartbeat()
    assert b.member_id not in group_of(env, "g").members
    settle([a])
    assert len(a.partitions()) == 4
    r = b.heartbeat()
    assert r.error_code == E.UNKNOWN_MEMBER_ID


def test_member_that_does_not_revoke_is_fenced_after_its_rebalance_timeout(env):
    env.topics.add("t", 4)
    a = Client(env, "g", ["t"], rebalance=5000)
    a.heartbeat()
    b = Client(env, "g", ["t"])
    b.heartbeat()
    a.heartbeat(ack=False)  # asked to revoke, but never confirms
    for _ in range(3):
        env.loop.advance(2000)
        a.heartbeat(ack=False)
        b.heartbeat()
    assert a.member_id not in group_of(env, "g").members
    settle([b])
    assert len(b.partitions()) == 4


def test_topic_growth_and_regex_subscriptions(env):
    t1 = env.topics.add("orders-eu", 2)
    env.topics.add("payments", 2)
    a = Client(env, "g", [], regex="orders-.*")
    a.heartbeat()
    assert a.owned == {t1: {0, 1}}
    t2 = env.topics.add("orders-us", 1)  # a new matching topic
    env.topics.add("orders-eu", 3)  # and a topic that gained a partition
    settle([a])
    assert a.owned == {t1: {0, 1, 2}, t2: {0}}
    assert group_of(env, "g").group_epoch == 2


def test_a_backtracking_regex_is_matched_in_linear_time(env):
    # With Python's re, "(a+)+$" against 26 a's and a b took 4 s (doubling per character),
    # and any client may create such a topic and send such a pattern. RE2 (as Kafka's RE2/J)
    # answers at once; pytest-timeout would stop a backtracking match long before it ended.
    env.topics.add("a" * 40 + "b", 1)
    env.topics.add("aaaa", 1)
    started = time.process_time()
    c = Client(env, "g", [], regex="(a+)+$")
    c.heartbeat()
    assert [env.topics.topic_name(t) for t in c.owned] == ["aaaa"]
    assert time.process_time() - started < 5  # a bound on runaway work, not a speed check


def test_invalid_requests(env):
    env.topics.add("t", 1)
    c = env.coordinator

    def hb(**kw):
        args = dict(group_id="g", member_id="m", member_epoch=0, instance_id=None, rack_id=None,
                    rebalance_timeout=1000, subscribed_topic_names=["t"],
                    subscribed_topic_regex=None, server_assignor=None, topic_partitions=[],
                    client_id="c", client_host="/h")
        args.update(kw)
        return c.consumer.consumer_group_heartbeat(**args).error_code

    assert hb(group_id="") == E.INVALID_REQUEST
    assert hb(member_id="") == E.INVALID_REQUEST
    assert hb(rebalance_timeout=-1) == E.INVALID_REQUEST
    assert hb(topic_partitions=None) == E.INVALID_REQUEST
    assert hb(subscribed_topic_names=None) == E.INVALID_REQUEST
    assert hb(member_epoch=-3) == E.INVALID_REQUEST
    assert hb(member_epoch=-2) == E.INVALID_REQUEST  # a static leave needs an instance id
    assert hb(server_assignor="magic") == E.UNSUPPORTED_ASSIGNOR
    assert hb(subscribed_topic_regex="(unclosed") == E.INVALID_REGULAR_EXPRESSION
    assert hb(member_epoch=3, group_id="unknown") == E.UNKNOWN_MEMBER_ID
    assert hb() == E.NONE
    assert hb(member_epoch=7) == E.FENCED_MEMBER_EPOCH
    assert hb(member_id="other", member_epoch=1) == E.UNKNOWN_MEMBER_ID


def test_offset_commit_and_fetch_use_member_epochs(env):
    env.topics.add("t", 2)
    a = Client(env, "g", ["t"])
    a.heartbeat()
    c = env.coordinator
    ok = c.offsets.commit_offsets("g", a.epoch, a.member_id, None, -1,
                                  [("t", [(0, 5, -1, None)])], 9)
    assert ok == [("t", [(0, E.NONE)])]
    b = Client(env, "g", ["t"])
    b.heartbeat()
    a.heartbeat(ack=False)
    a.heartbeat()  # a moves to epoch 2
    for epoch, member, version, code in ((1, a.member_id, 9, E.STALE_MEMBER_EPOCH),
                                         (a.epoch, "nobody", 9, E.UNKNOWN_MEMBER_ID),
                                         (a.epoch, a.member_id, 8, E.UNSUPPORTED_VERSION),
                                         (-1, "", 9, E.UNKNOWN_MEMBER_ID)):
        with pytest.raises(KafkaError) as exc:
            c.offsets.commit_offsets("g", epoch, member, None, -1, [("t", [(0, 6, -1, None)])],
                                     version)
        assert exc.value.code == code
    with pytest.raises(KafkaError) as exc:
        c.offsets.fetch_offsets("g", [("t", [0])], a.member_id, 1)
    assert exc.value.code == E.STALE_MEMBER_EPOCH
    assert c.offsets.fetch_offsets("g", [("t", [0])], a.member_id, a.epoch) == [
        ("t", [(0, 5, -1, "")])]
    assert c.offsets.fetch_offsets("g", [("t", [0])]) == [("t", [(0, 5, -1, "")])]  # admin fetch
    a.leave()
    b.leave()
    assert c.offsets.commit_offsets("g", -1, "", None, -1, [("t", [(1, 9, -1, None)])], 9) == [
        ("t", [(1, E.NONE)])]  # empty group: admin commits are fine


def test_static_member_comes_back_with_its_partitions(env):
    t = env.topics.add("t", 4)
    a = Client(env, "g", ["t"], instance="i-a")
    b = Client(env, "g", ["t"])
    settle([a, b])
    epoch_before = group_of(env, "g").group_epoch
    owned_before = set(a.owned[t])
    assert a.leave(epoch=-2).member_epoch == -2  # a restart: leaves temporarily
    a2 = Client(env, "g", ["t"], instance="i-a")  # new process, new member id
    r = a2.heartbeat()
    assert r.error_code == 0 and a2.owned == {t: owned_before}
    assert group_of(env, "g").group_epoch == epoch_before  # no rebalance
    assert a.heartbeat(epoch=a.epoch or 1).error_code == E.FENCED_INSTANCE_ID
    intruder = Client(env, "g", ["t"], instance="i-a")
    assert intruder.heartbeat().error_code == E.UNRELEASED_INSTANCE_ID


def test_state_survives_a_restart(env):
    t = env.topics.add("t", 4)
    a, b = Client(env, "g", ["t"]), Client(env, "g", ["t"], regex="nothing-.*")
    settle([a, b])
    before = {c.member_id: (c.epoch, c.partitions()) for c in (a, b)}
    g = group_of(env, "g")
    epochs = (g.group_epoch, g.assignment_epoch)
    env.restart()
    g = group_of(env, "g")
    assert (g.group_epoch, g.assignment_epoch) == epochs
    assert {m.member_id: (m.member_epoch, {(tt, p) for tt, ps in m.assigned.items() for p in ps})
            for m in g.members.values()} == before
    assert g.members[b.member_id].subscribed_topic_regex == "nothing-.*"
    settle([a, b])  # members carry on where they were
    assert {c.member_id: (c.epoch, c.partitions()) for c in (a, b)} == before
    assert t in a.owned or t in b.owned


def test_describe_and_list(env):
    t = env.topics.add("t", 2)
    a = Client(env, "g", ["t"])
    a.heartbeat()
    c = env.coordinator
    (d,) = c.consumer.consumer_group_describe(["g"], include_authorized_operations=False)
    assert d.error_code == 0 and d.group_state == "Stable" and d.assignor_name == \
        "uniform"
    (m,) = d.members
    assert m.member_id == a.member_id and m.subscribed_topic_names == ("t",)
    assert m.assignment == (DescribedTopic(t, "t", (0, 1)),)
    c.offsets.commit_offsets("classic", -1, "", None, -1, [("t", [(0, 1, -1, None)])], 9)
    missing, classic = c.consumer.consumer_group_describe(["nope", "classic"],
                                                          include_authorized_operations=False)
    assert missing.error_code == classic.error_code == E.GROUP_ID_NOT_FOUND
    groups = {g.group_id: g for g in c.list_groups()[1]}
    assert groups["g"].group_type == "consumer" and groups["g"].protocol_type == "consumer"
    assert [g.group_id for g in c.list_groups([], ["consumer"])[1]] == ["g"]


def test_conversions_between_empty_classic_and_consumer_groups(env, h):
    env.topics.add("t", 1)
    c = env.coordinator
    c.offsets.commit_offsets("g", -1, "", None, -1, [("t", [(0, 3, -1, None)])], 9)  # simple group
    a = Client(env, "g", ["t"])
    assert a.heartbeat().error_code == 0
    a.leave()
    join = h.Reply()
    c.classic.join_group(h.join_req("g"), join)  # the empty consumer group becomes classic again
    assert join.value.error_code == E.MEMBER_ID_REQUIRED
    assert c.offsets.fetch_offsets("g", [("t", [0])]) == [("t", [(0, 3, -1, "")])]
    mid = join.value.member_id
    c.classic.join_group(h.join_req("g", mid), h.Reply())
    b = Client(env, "g", ["t"])
    assert b.heartbeat().error_code == E.GROUP_ID_NOT_FOUND  # a busy classic group


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.sampled_from(["join", "hb", "hb_noack", "leave", "grow", "tick"]),
                              st.integers(0, 3)), min_size=5, max_size=40))
def test_no_partition_is_ever_owned_twice(tmp_path_factory, h, ops):
    """Random joins, leaves, lost acks, topic growth and time: clients never overlap, and once
    everyone heartbeats the assignment covers every partition."""
    loop = h.FakeLoop()
    offsets = h.LogsTopic(tmp_path_factory.mktemp("p"), 3, loop)
    offsets.create()
    from strom.coordinator.group.coordinator import GroupConfig

    env = h.Env(loop, offsets, h.FakeTopics(), GroupConfig(
        offsets_partitions=3, initial_rebalance_delay=0, consumer_session_timeout=60000))
    topic = env.topics.add("t", 5)
    clients: list[Client | None] = [None] * 4
    partitions = 5
    for op, i in ops:
        cl = clients[i]
        if op == "join" and cl is None:
            clients[i] = Client(env, "g", ["t"])
            clients[i].heartbeat()
        elif op in ("hb", "hb_noack") and cl is not None:
            cl.heartbeat(ack=op == "hb")
            if cl.last.error_code:
                clients[i] = None  # fenced: drops everything, as a real client does
        elif op == "leave" and cl is not None:
            cl.leave()
            clients[i] = None
        elif op == "grow" and partitions < 12:
            partitions += 1
            env.topics.add("t", partitions)
        elif op == "tick":
            loop.advance(1000)
        assert_exclusive([c for c in clients if c is not None])
    live = [c for c in clients if c is not None]
    if live:
        settle(live, rounds=8)
        assert set().union(*(c.partitions() for c in live)) == {(topic, p)
                                                                 for p in range(partitions)}


def test_group_configs_set_one_groups_heartbeat_interval_and_session_timeout(env):
    """consumer.heartbeat.interval.ms and consumer.session.timeout.ms per group (Kafka's group
    configs): the group that sets them gets them, the others the broker's."""
    configs = StaticGroupConfigs(env.config.effective_group_config())
    env.coordinator.shutdown()
    env.coordinator = GroupCoordinator(env.config, env.offsets, env.topics, env.loop,
                                       env.loop.now_ms, group_configs=configs)
    for p in range(env.offsets.partitions):
        env.coordinator.on_leadership(p, True, 0)
    env.loop.advance(0)
    assert env.coordinator.group_configs is configs
    configs.set("slow", EffectiveGroupConfig(consumer_heartbeat_interval_ms=7000,
                                             consumer_session_timeout_ms=30000))
    env.topics.add("t", 2)
    slow, fast = Client(env, "slow", ["t"]), Client(env, "fast", ["t"])
    assert slow.heartbeat().heartbeat_interval == 7000
    assert fast.heartbeat().heartbeat_interval == env.config.consumer_heartbeat_interval
    env.loop.advance(env.config.consumer_session_timeout + 1000)  # 11 s: fast's expired
    assert fast.member_id not in group_of(env, "fast").members
    assert slow.member_id in group_of(env, "slow").members
    env.loop.advance(20000)
    assert slow.member_id not in group_of(env, "slow").members
