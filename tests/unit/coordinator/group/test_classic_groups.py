"""The classic group protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) on a fake clock."""

from __future__ import annotations

import pytest

from strom.coordinator.group.replies import SyncReply
from strom.coordinator.group.state import ClassicState
from strom.protocol.errors import ErrorCode as E


def join_new(env, h, group, *, instance=None, protocols=None, session=10000, rebalance=30000):
    """First JoinGroup (v4+: MEMBER_ID_REQUIRED for dynamic members), then the real one.
    Returns (member id, reply of the second join)."""
    c = env.coordinator
    if instance is None:
        first = h.Reply()
        c.classic.join_group(h.join_req(group, protocols=protocols, session=session,
                                        rebalance=rebalance), first)
        assert first.value.error_code == E.MEMBER_ID_REQUIRED
        member_id = first.value.member_id
        reply = h.Reply()
        c.classic.join_group(h.join_req(group, member_id, protocols=protocols, session=session,
                                        rebalance=rebalance), reply)
        return member_id, reply
    reply = h.Reply()
    c.classic.join_group(h.join_req(group, instance=instance, protocols=protocols, session=session,
                                    rebalance=rebalance), reply)
    return None, reply


def sync(env, h, group, generation, member_id, assignments=(), instance=None):
    reply = h.Reply()
    env.coordinator.classic.sync_group(group, generation, member_id, instance, "consumer", None,
                                       list(assignments), reply)
    return reply


def stable_group(env, h, group, n=1):
    """n dynamic members joined and synced; returns their ids (leader first) and generation."""
    ids = []
    replies = []
    for _ in range(n):
        mid, reply = join_new(env, h, group)
        ids.append(mid)
        replies.append(reply)
    env.loop.advance(0)  # initial rebalance delay (0 in the fixture)
    generation = replies[-1].value.generation_id
    leader = replies[-1].value.leader
    syncs = {m: sync(env, h, group, generation, m,
                     [(x, x.encode()) for x in ids] if m == leader else ())
             for m in sorted(ids, key=lambda m: m != leader)}
    for m, r in syncs.items():
        assert r.value.error_code == 0 and r.value.assignment == m.encode()
    return [leader] + [m for m in ids if m != leader], generation


def test_single_member_join_sync_heartbeat(env, h):
    c = env.coordinator
    mid, reply = join_new(env, h, "g")
    assert not reply.done  # parked until the initial-rebalance delay expires
    env.loop.advance(0)
    r = reply.value
    assert r.error_code == 0 and r.generation_id == 1 and r.leader == mid
    assert r.protocol_name == "range" and r.protocol_type == "consumer"
    assert [m.member_id for m in r.members] == [mid]
    assert r.members[0].metadata == b"sub"
    s = sync(env, h, "g", 1, mid, [(mid, b"assigned")])
    assert s.value == SyncReply(protocol_type="consumer", protocol_name="range",
                               assignment=b"assigned")
    assert c.group("g").state == ClassicState.STABLE
    assert c.classic.heartbeat("g", 1, mid, None) == E.NONE
    assert c.classic.heartbeat("g", 2, mid, None) == E.ILLEGAL_GENERATION
    assert c.classic.heartbeat("g", 1, "nobody", None) == E.UNKNOWN_MEMBER_ID
    assert c.classic.heartbeat("other", 1, mid, None) == E.UNKNOWN_MEMBER_ID
    assert c.classic.heartbeat("", 1, mid, None) == E.INVALID_GROUP_ID


def test_second_member_triggers_rebalance_and_leader_assigns(env, h):
    c = env.coordinator
    (a,), gen = stable_group(env, h, "g")
    b, join_b = join_new(env, h, "g")
    assert not join_b.done
    assert c.group("g").state == ClassicState.PREPARING_REBALANCE
    assert c.classic.heartbeat("g", gen, a, None) == E.REBALANCE_IN_PROGRESS
    rejoin_a = h.Reply()
    c.classic.join_group(h.join_req("g", a), rejoin_a)
    ra, rb = rejoin_a.value, join_b.value  # all members joined: completes at once
    assert ra.generation_id == rb.generation_id == gen + 1
    assert ra.leader == rb.leader == a
    assert {m.member_id for m in ra.members} == {a, b} and rb.members == ()
    follower = sync(env, h, "g", gen + 1, b)
    assert not follower.done  # waits for the leader's assignment
    leader = sync(env, h, "g", gen + 1, a, [(a, b"A"), (b, b"B")])
    assert leader.value.assignment == b"A" and follower.value.assignment == b"B"
    assert c.group("g").state == ClassicState.STABLE
    # a stale generation is refused everywhere
    assert sync(env, h, "g", gen, b).value.error_code == E.ILLEGAL_GENERATION
    assert c.classic.heartbeat("g", gen, b, None) == E.ILLEGAL_GENERATION


def test_session_timeout_removes_member_and_rebalances(env, h):
    c = env.coordinator
    (a, b), gen = stable_group(env, h, "g", 2)
    for _ in range(3):  # a keeps heartbeating, b is silent
        env.loop.advance(3000)
        assert c.classic.heartbeat("g", gen, a, None) == E.NONE
    env.loop.advance(3000)  # b's 10 s session is over
    assert b not in c.group("g").members
    assert c.group("g").state == ClassicState.PREPARING_REBALANCE
    assert c.classic.heartbeat("g", gen, a, None) == E.REBALANCE_IN_PROGRESS
    rejoin = h.Reply()
    c.classic.join_group(h.join_req("g", a), rejoin)
    assert rejoin.value.generation_id == gen + 1
    assert [m.member_id for m in rejoin.value.members] == [a]


def test_member_that_does_not_rejoin_is_dropped_after_the_rebalance_timeout(env, h):
    c = env.coordinator
    (a, b), gen = stable_group(env, h, "g", 2)
    new, join_new_reply = join_new(env, h, "g")
    rejoin_a = h.Reply()
    c.classic.join_group(h.join_req("g", a), rejoin_a)
    for _ in range(9):  # b stays alive but never rejoins
        env.loop.advance(3000)
        assert c.classic.heartbeat("g", gen, b, None) == E.REBALANCE_IN_PROGRESS
        assert c.classic.heartbeat("g", gen, a, None) == E.REBALANCE_IN_PROGRESS
    assert not rejoin_a.done
    env.loop.advance(3001)  # the rebalance timeout (30 s) is over
    assert rejoin_a.value.generation_id == gen + 1
    assert join_new_reply.value.generation_id == gen + 1
    assert set(c.group("g").members) == {a, new}
    assert c.classic.heartbeat("g", gen, b, None) == E.UNKNOWN_MEMBER_ID


def test_member_that_never_syncs_is_removed(env, h):
    c = env.coordinator
    a, ja = join_new(env, h, "g", rebalance=5000)
    b, _jb = join_new(env, h, "g", rebalance=5000)
    env.loop.advance(0)
    gen = ja.value.generation_id
    leader = ja.value.leader
    other = b if leader == a else a
    sync(env, h, "g", gen, leader, [(a, b"A"), (b, b"B")])
    env.loop.advance(5001)  # `other` never sent SyncGroup
    assert other not in c.group("g").members
    assert c.group("g").state == ClassicState.PREPARING_REBALANCE


def test_initial_rebalance_delay_waits_for_more_members(env, h):
    env.config.initial_rebalance_delay = 3000
    _a, ja = join_new(env, h, "g")
    env.loop.advance(1000)
    _b, jb = join_new(env, h, "g")
    env.loop.advance(1999)
    assert not ja.done
    env.loop.advance(1)  # t=3000: a new member arrived, so the delay is extended once more
    assert not ja.done and not jb.done
    env.loop.advance(2999)
    assert not ja.done
    env.loop.advance(1)  # t=6000
    assert ja.value.generation_id == jb.value.generation_id == 1
    assert len(ja.value.members or jb.value.members) == 2


def test_protocol_selection_by_votes_and_inconsistent_protocols(env, h):
    c = env.coordinator
    env.config.initial_rebalance_delay = 100
    protos = [[("range", b"1"), ("roundrobin", b"2")], [("roundrobin", b"3"), ("range", b"4")],
              [("range", b"5"), ("roundrobin", b"6")]]
    replies = [join_new(env, h, "g", protocols=p)[1] for p in protos]
    bad = h.Reply()
    c.classic.join_group(h.join_req("g", protocols=[("sticky", b"")]), bad)
    assert bad.value.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    wrong_type = h.Reply()
    c.classic.join_group(h.join_req("g", protocols=[("range", b"")], protocol_type="connect"),
                         wrong_type)
    assert wrong_type.value.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    env.loop.advance(1000)  # the initial delay, extended once because members kept coming
    assert {r.value.protocol_name for r in replies} == {"range"}
    leader = next(r.value for r in replies if r.value.members)
    assert sorted(m.metadata for m in leader.members) == [b"1", b"4", b"5"]


def test_invalid_session_timeout_and_group_id(env, h):
    c = env.coordinator
    for session in (env.config.min_session_timeout - 1, env.config.max_session_timeout + 1):
        r = h.Reply()
        c.classic.join_group(h.join_req("g", session=session), r)
        assert r.value.error_code == E.INVALID_SESSION_TIMEOUT
    r = h.Reply()
    c.classic.join_group(h.join_req(""), r)
    assert r.value.error_code == E.INVALID_GROUP_ID
    r = h.Reply()
    c.classic.join_group(h.join_req("nope", "made-up-member"), r)
    assert r.value.error_code == E.UNKNOWN_MEMBER_ID


def test_old_clients_join_without_member_id_round_trip(env, h):
    r = h.Reply()
    env.coordinator.classic.join_group(h.join_req("g", v4=False), r)
    env.loop.advance(0)
    assert r.value.error_code == 0 and r.value.member_id.startswith("client-")


def test_pending_member_expires_if_it_never_rejoins(env, h):
    c = env.coordinator
    first = h.Reply()
    c.classic.join_group(h.join_req("g", session=6000), first)
    pending = first.value.member_id
    assert pending in c.group("g").pending_members
    env.loop.advance(6001)
    assert pending not in c.group("g").pending_members
    late = h.Reply()
    c.classic.join_group(h.join_req("g", pending, session=6000), late)
    assert late.value.error_code == E.UNKNOWN_MEMBER_ID


def test_static_member_restart_keeps_assignment_without_rebalance(env, h):
    c = env.coordinator
    _, ja = join_new(env, h, "g", instance="i-1")
    b, _jb = join_new(env, h, "g")
    env.loop.advance(0)
    a = ja.value.member_id
    gen = ja.value.generation_id
    leader = ja.value.leader
    s = {m: sync(env, h, "g", gen, m, [(a, b"A"), (b, b"B")] if m == leader else ())
         for m in sorted((a, b), key=lambda m: m != leader)}
    assert s[a].value.assignment == b"A"
    # the static member's process restarts: a new JoinGroup with no member id, same instance
    again = h.Reply()
    c.classic.join_group(h.join_req("g", instance="i-1"), again)
    r = again.value
    assert r.error_code == 0 and r.generation_id == gen and r.member_id != a
    assert c.group("g").state == ClassicState.STABLE
    assert c.classic.heartbeat("g", gen, b, None) == E.NONE  # the other member sees no rebalance
    new_a = r.member_id
    assert sync(env, h, "g", gen, new_a, instance="i-1").value.assignment == b"A"
    # the old incarnation is fenced
    assert c.classic.heartbeat("g", gen, a, "i-1") == E.FENCED_INSTANCE_ID
    assert sync(env, h, "g", gen, a, instance="i-1").value.error_code == E.FENCED_INSTANCE_ID
    with pytest.raises(Exception) as exc:
        c.offsets.commit_offsets("g", gen, a, "i-1", -1, [("t", [(0, 1, -1, None)])], 8)
    assert exc.value.code == E.FENCED_INSTANCE_ID
    # ...and the new member id survives a restart of the broker
    c2 = env.restart()
    assert c2.classic.heartbeat("g", gen, new_a, "i-1") == E.NONE


def test_static_member_dropped_after_session_timeout(env, h):
    c = env.coordinator
    _, ja = join_new(env, h, "g", instance="i-1", session=6000)
    env.loop.advance(0)
    a = ja.value.member_id
    sync(env, h, "g", 1, a, [(a, b"A")], instance="i-1")
    env.loop.advance(6001)
    assert c.group("g").members == {}
    assert c.group("g").state in (ClassicState.PREPARING_REBALANCE, ClassicState.EMPTY)


def test_leave_group_batch_and_errors(env, h):
    c = env.coordinator
    (a, b), gen = stable_group(env, h, "g", 2)
    error, results = c.classic.leave_group("g", [(a, None, "bye"), ("ghost", None, None),
                                                 ("", "no-such-instance", None)])
    assert error == E.NONE
    assert [r.error_code for r in results] == [E.NONE, E.UNKNOWN_MEMBER_ID,
                                                  E.UNKNOWN_MEMBER_ID]
    assert set(c.group("g").members) == {b}
    assert c.group("g").state == ClassicState.PREPARING_REBALANCE
    assert c.classic.leave_group("unknown-group", [(a, None, None)])[0] == E.UNKNOWN_MEMBER_ID
    rejoin = h.Reply()
    c.classic.join_group(h.join_req("g", b), rejoin)
    assert rejoin.value.generation_id == gen + 1
    c.classic.leave_group("g", [(b, None, None)])
    assert c.group("g").state == ClassicState.EMPTY


def test_a_parked_join_learns_the_broker_is_no_longer_the_coordinator(env, h):
    c = env.coordinator
    first = h.Reply()
    c.classic.join_group(h.join_req("g"), first)
    parked = h.Reply()
    c.classic.join_group(h.join_req("g", first.value.member_id), parked)
    assert not parked.done  # waits for the (initial) rebalance delay
    c.on_leadership(c.partition_for("g"), False)
    assert parked.value.error_code == E.NOT_COORDINATOR
    env.loop.advance(60_000)  # and its timers went with the partition
    assert len(parked.values) == 1 and env.loop.pending() == 0
