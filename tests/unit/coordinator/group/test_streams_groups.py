"""KIP-1071 streams groups on the coordinator: heartbeats, internal topics, task moves,
fencing, offsets, persistence, and the group APIs shared with the other protocols."""

from __future__ import annotations

import uuid

import pytest

from strom.coordinator.group.replies import (
    EndpointPartitions,
    ListedGroup,
    StreamsHeartbeatReply,
)
from strom.coordinator.group.streams_groups import StreamsHeartbeat
from strom.coordinator.group.streams_state import (
    StreamsGroup,
    StreamsMemberState,
    StreamsState,
    StreamsTopology,
    Subtopology,
    TopicInfo,
)
from strom.coordinator.group.streams_topology import NewTopic, Status
from strom.protocol.errors import ErrorCode as E
from strom.protocol.errors import KafkaError

GROUP = "app"


def topology(epoch: int = 0) -> StreamsTopology:
    return StreamsTopology(epoch, (
        Subtopology("0", source_topics=("lines",), repartition_sink_topics=("app-r",)),
        Subtopology("1", repartition_source_topics=(TopicInfo("app-r"),),
                    state_changelog_topics=(TopicInfo("app-c"),)),
    ))


class Creator:
    """The broker's topic creation, on the fake topics."""

    def __init__(self, topics) -> None:
        self.topics = topics
        self.created: list[NewTopic] = []
        self.enabled = True

    def create(self, topics: list[NewTopic]) -> None:
        if self.enabled:
            for t in topics:
                self.created.append(t)
                self.topics.add(t.name, t.partitions)


class Client:
    """A Streams client: applies each assignment at once and reports what it owns."""

    def __init__(self, env, member_id: str | None = None, process: str | None = None,
                 topo: StreamsTopology | None = None) -> None:
        self.env = env
        self.member_id = member_id or uuid.uuid4().hex
        self.process = process or uuid.uuid4().hex
        self.topology = topo or topology()
        self.epoch = 0
        self.active: dict[str, set[int]] = {}
        self.standby: dict[str, set[int]] = {}
        self.last: StreamsHeartbeatReply | None = None

    def heartbeat(self, *, epoch: int | None = None, report: bool = True,
                  **extra) -> StreamsHeartbeatReply:
        join = self.epoch == 0
        owned = {"active_tasks": {s: frozenset(p) for s, p in self.active.items()},
                 "standby_tasks": {s: frozenset(p) for s, p in self.standby.items()},
                 "warmup_tasks": {}} if report or join else {}
        r = self.env.coordinator.streams.heartbeat(StreamsHeartbeat(
            group_id=GROUP, member_id=self.member_id,
            member_epoch=self.epoch if epoch is None else epoch, client_id="c",
            client_host="/h", rebalance_timeout=30000 if join else -1,
            topology=self.topology if join else None, process_id=self.process if join else None,
            **owned, **extra))
        self.last = r
        if r.error_code == 0:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.active = {s: set(ps) for s, ps in r.assignment.active}
                self.standby = {s: set(ps) for s, ps in r.assignment.standby}
        return r

    def tasks(self) -> set[tuple[str, int]]:
        return {(s, p) for s, ps in self.active.items() for p in ps}

    def statuses(self) -> set[int]:
        return {s.code for s in self.last.status} if self.last is not None else set()


@pytest.fixture
def creator(env) -> Creator:
    c = Creator(env.topics)
    env.coordinator.streams.internal_topics = c
    env.config.streams_initial_rebalance_delay = 0
    env.topics.add("lines", 4)
    return c


def group(env) -> StreamsGroup:
    g = env.coordinator.group(GROUP)
    assert isinstance(g, StreamsGroup)
    return g


def settle(*clients: Client, rounds: int = 6) -> None:
    for _ in range(rounds):
        for c in clients:
            c.heartbeat()


def test_first_member_creates_internal_topics_and_gets_every_task(env, creator) -> None:
    a = Client(env)
    r = a.heartbeat()
    assert r.error_code == 0 and r.member_epoch == 1
    assert {(t.name, t.partitions) for t in creator.created} == {("app-r", 4), ("app-c", 4)}
    assert a.tasks() == {(s, p) for s in "01" for p in range(4)}
    assert r.status == () and r.heartbeat_interval == env.config.streams_heartbeat_interval
    assert group(env).state == StreamsState.STABLE


def test_missing_source_topics_are_a_status_and_no_tasks(env, creator) -> None:
    a = Client(env, topo=StreamsTopology(0, (Subtopology("0", source_topics=("nope",)),)))
    r = a.heartbeat()
    assert r.error_code == 0 and a.statuses() == {Status.MISSING_SOURCE_TOPICS}
    assert a.tasks() == set()
    assert group(env).state == StreamsState.NOT_READY
    env.topics.add("nope", 2)  # the topic appears: the next heartbeat assigns
    r = a.heartbeat()
    assert a.statuses() == set() and a.tasks() == {("0", 0), ("0", 1)}


def test_internal_topics_not_created_yet_are_reported(env, creator) -> None:
    creator.enabled = False
    a = Client(env)
    a.heartbeat()
    assert a.statuses() == {Status.MISSING_INTERNAL_TOPICS}
    assert a.last is not None and "app-c" in a.last.status[0].detail
    creator.enabled = True
    a.heartbeat()
    assert a.statuses() == set() and len(a.tasks()) == 8


def test_a_task_moves_only_after_its_owner_revoked_it(env, creator) -> None:
    a, b = Client(env), Client(env)
    a.heartbeat()
    b.heartbeat()
    assert b.tasks() == set()  # its target tasks are still a's
    assert group(env).members[b.member_id].state == StreamsMemberState.UNRELEASED_TASKS
    b_epoch = b.epoch
    a.heartbeat(report=False)  # a learns what to revoke but has not confirmed
    assert group(env).members[a.member_id].state == StreamsMemberState.UNREVOKED_TASKS
    assert len(a.tasks()) == 4 and a.epoch == 1  # it keeps its epoch while revoking
    b.heartbeat()
    assert b.tasks() == set() and b.epoch == b_epoch
    a.heartbeat()  # reports the revoked tasks gone
    assert a.epoch == 2
    b.heartbeat()
    assert len(b.tasks()) == 4 and not a.tasks() & b.tasks()
    assert group(env).state == StreamsState.STABLE


def test_a_silent_member_is_fenced_and_its_tasks_move(env, creator) -> None:
    a, b = Client(env), Client(env)
    settle(a, b)
    env.loop.advance(env.config.streams_session_timeout - 100)
    a.heartbeat()
    env.loop.advance(200)
    assert b.member_id not in group(env).members
    settle(a)
    assert len(a.tasks()) == 8
    assert b.heartbeat().error_code == E.UNKNOWN_MEMBER_ID


def test_leaving_hands_the_tasks_over(env, creator) -> None:
    a, b = Client(env), Client(env)
    settle(a, b)
    assert b.heartbeat(epoch=-1).error_code == 0
    settle(a)
    assert len(a.tasks()) == 8


def test_member_epochs_are_checked(env, creator) -> None:
    a = Client(env)
    a.heartbeat()
    assert a.heartbeat(epoch=a.epoch + 1).error_code == E.FENCED_MEMBER_EPOCH
    stranger = Client(env)
    stranger.epoch = 3
    assert stranger.heartbeat().error_code == E.UNKNOWN_MEMBER_ID


def test_invalid_requests(env, creator) -> None:
    r = env.coordinator.streams.heartbeat(StreamsHeartbeat(
        GROUP, "m", 0, "c", "/h", rebalance_timeout=1000, topology=None, active_tasks={},
        standby_tasks={}, warmup_tasks={}, process_id="p"))
    assert r.error_code == E.INVALID_REQUEST and "Topology" in (r.error_message or "")
    bad = StreamsTopology(0, (Subtopology("0", repartition_source_topics=(TopicInfo("x"),)),))
    assert Client(env, topo=bad).heartbeat().error_code == E.STREAMS_INVALID_TOPOLOGY


def test_the_first_topology_stays(env, creator) -> None:
    """Kafka 4.4 refuses topology updates, also at a new epoch and in an empty group."""
    a = Client(env)
    a.heartbeat()
    for other in (StreamsTopology(0, (Subtopology("0", ("lines", "more")),)), topology(1)):
        r = Client(env, topo=other).heartbeat()
        assert (r.error_code, r.error_message) == (
            E.INVALID_REQUEST, "Topology updates are not supported yet.")
        assert list(group(env).members) == [a.member_id]  # the refused member left no trace
    assert Client(env).heartbeat().error_code == 0  # the same topology joins
    a.heartbeat(epoch=-1)


def test_the_first_assignment_waits_for_the_initial_delay(env, creator) -> None:
    env.config.streams_initial_rebalance_delay = 3000
    a, b = Client(env), Client(env)
    a.heartbeat()
    assert a.tasks() == set() and a.statuses() == {Status.ASSIGNMENT_DELAYED}
    b.heartbeat()
    env.loop.advance(3000)
    settle(a, b)
    assert len(a.tasks()) == len(b.tasks()) == 4 and a.statuses() == set()
    assert not any(m.state == StreamsMemberState.UNREVOKED_TASKS  # nothing had to move
                   for m in group(env).members.values())


def test_unknown_groups(env, creator) -> None:
    ghost = Client(env)
    ghost.epoch = 4
    r = ghost.heartbeat()
    assert (r.error_code, r.error_message) == (E.GROUP_ID_NOT_FOUND,
                                               f"Streams group {GROUP} not found.")
    assert ghost.heartbeat(epoch=-1).error_code == E.GROUP_ID_NOT_FOUND
    [d] = env.coordinator.streams.describe([GROUP], include_authorized_operations=False)
    assert (d.error_code, d.group_state) == (E.GROUP_ID_NOT_FOUND, "")


def test_shutdown_request_reaches_every_member(env, creator) -> None:
    a, b = Client(env), Client(env)
    settle(a, b)
    a.heartbeat(shutdown_application=True)
    b.heartbeat()
    assert Status.SHUTDOWN_APPLICATION in b.statuses()


def test_standby_replicas_from_the_broker_config(env, creator) -> None:
    env.config.streams_num_standby_replicas = 1
    a, b = Client(env), Client(env)
    settle(a, b)
    assert a.standby and b.standby
    assert not a.standby.get("0")  # subtopology 0 has no state store


def test_offset_commits_carry_the_member_epoch(env, creator, h) -> None:
    a = Client(env)
    a.heartbeat()
    c = env.coordinator
    assert h.commit(c, GROUP, {("lines", 0): 5}, generation=a.epoch, member=a.member_id,
                    version=9) == {("lines", 0): E.NONE}
    with pytest.raises(KafkaError) as exc:
        h.commit(c, GROUP, {("lines", 0): 6}, generation=a.epoch - 1, member=a.member_id,
                 version=9)
    assert exc.value.code == E.STALE_MEMBER_EPOCH
    with pytest.raises(KafkaError) as exc:
        h.commit(c, GROUP, {("lines", 0): 6}, generation=a.epoch, member="x", version=9)
    assert exc.value.code == E.UNKNOWN_MEMBER_ID
    assert h.fetched(c, GROUP, member_id=a.member_id, member_epoch=a.epoch) == {("lines", 0): 5}
    with pytest.raises(KafkaError) as exc:  # what the transactional producer can abort on
        c.offsets.commit_transactional_offsets(GROUP, 7, 0, a.member_id, a.epoch + 5, None,
                                               [("lines", [(0, 9, -1, None)])])
    assert exc.value.code == E.ILLEGAL_GENERATION


def test_the_group_survives_a_restart(env, creator) -> None:
    a, b = Client(env), Client(env)
    settle(a, b)
    before = group(env)
    epochs = (before.group_epoch, before.assignment_epoch)
    members = {m: (x.member_epoch, x.assigned) for m, x in before.members.items()}
    c = env.restart()
    c.streams.internal_topics = creator
    after = group(env)
    assert (after.group_epoch, after.assignment_epoch) == epochs
    assert {m: (x.member_epoch, x.assigned) for m, x in after.members.items()} == members
    assert after.topology == before.topology
    settle(a, b)
    assert group(env).group_epoch == epochs[0]  # no rebalance
    assert len(a.tasks() | b.tasks()) == 8


def test_list_describe_and_delete(env, creator) -> None:
    a = Client(env)
    settle(a)
    c = env.coordinator
    _, listed = c.list_groups(types=["streams"])
    assert listed == [ListedGroup(GROUP, protocol_type="streams", group_state="Stable",
                                  group_type="streams")]
    [d] = c.streams.describe([GROUP], include_authorized_operations=False)
    assert d.error_code == 0 and d.group_state == "Stable" and d.topology is not None
    assert d.topology.subtopologies[1].state_changelog_topics[0].partitions == 4
    assert d.members[0].process_id == a.process
    assert len(d.members[0].assignment.active) == 2
    [missing] = c.streams.describe(["nope"], include_authorized_operations=False)
    assert missing.error_code == E.GROUP_ID_NOT_FOUND
    [classic] = c.classic.describe_groups([GROUP], include_authorized_operations=False, version=6)
    assert classic.error_code == E.GROUP_ID_NOT_FOUND
    assert c.delete_groups([GROUP]) == [(GROUP, E.NON_EMPTY_GROUP)]
    a.heartbeat(epoch=-1)
    assert c.delete_groups([GROUP]) == [(GROUP, E.NONE)]
    assert c.group(GROUP) is None
    env.restart()
    assert env.coordinator.group(GROUP) is None


def test_other_protocols_cannot_take_a_streams_group(env, creator, h) -> None:
    Client(env).heartbeat()
    r = env.coordinator.consumer.consumer_group_heartbeat(
        group_id=GROUP, member_id="m", member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout=1000, subscribed_topic_names=["lines"], subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=[], client_id="c", client_host="/h")
    assert r.error_code == E.GROUP_ID_NOT_FOUND
    join = h.Reply()
    env.coordinator.classic.join_group(h.join_req(GROUP), join)
    assert join.value.error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_the_protocol_can_be_switched_off(env, creator) -> None:
    env.config.rebalance_protocols = ("classic", "consumer")
    assert Client(env).heartbeat().error_code == E.UNSUPPORTED_VERSION


def test_members_with_an_endpoint_learn_who_has_which_partitions(env, creator) -> None:
    """Interactive Queries: each member's source partitions, sent when the endpoint epoch the
    member knows is not the group's."""
    a = Client(env)
    a.heartbeat(user_endpoint=("host-a", 7001))
    settle(a)
    r = a.heartbeat(user_endpoint=("host-a", 7001), endpoint_information_epoch=-1)
    assert r.partitions_by_user_endpoint == (EndpointPartitions(
        "host-a", 7001, active=(("app-r", (0, 1, 2, 3)), ("lines", (0, 1, 2, 3)))),)
    known = r.endpoint_information_epoch
    again = a.heartbeat(endpoint_information_epoch=known)
    assert again.partitions_by_user_endpoint is None
    assert Client(env).heartbeat().partitions_by_user_endpoint is None  # no endpoint of its own


def test_an_empty_classic_group_becomes_a_streams_group_and_keeps_its_offsets(env, creator,
                                                                            h) -> None:
    c = env.coordinator
    assert h.commit(c, GROUP, {("lines", 1): 7}) == {("lines", 1): E.NONE}  # a "simple" group
    env.config.streams_max_size = 0
    assert Client(env).heartbeat().error_code == E.GROUP_MAX_SIZE_REACHED
    [d] = c.classic.describe_groups([GROUP], include_authorized_operations=False, version=5)
    assert d.group_state == "Empty"  # the failed join changed nothing
    env.config.streams_max_size = 10
    a = Client(env)
    a.heartbeat()
    assert isinstance(c.group(GROUP), StreamsGroup)
    assert h.fetched(c, GROUP) == {("lines", 1): 7}
    env.restart()
    assert isinstance(env.coordinator.group(GROUP), StreamsGroup)
