"""ClusterQuorumController: brokers register fenced, are unfenced once caught up, fenced when
their heartbeats stop; fenced brokers lose leaderships and leave ISRs; a controlled shutdown
moves leaderships first; only live brokers that are not shutting down join an ISR; a node
that does not lead the quorum answers NOT_CONTROLLER.

The fake quorum of test_quorum_controller commits every append at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from strom.cluster.image import BrokerInfo, MetadataImage
from strom.controller.cluster_controller import ClusterQuorumController
from strom.controller.loader import MetadataLoader
from strom.protocol.errors import ErrorCode, KafkaError

from .test_quorum_controller import FakeQuorum

DEADLINE_S = 10.0


def run(factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(factory(), DEADLINE_S))


def info(broker_id: int) -> BrokerInfo:
    return BrokerInfo(broker_id, "127.0.0.1", 9090 + broker_id,
                      endpoints={"PLAINTEXT": ("127.0.0.1", 9090 + broker_id)})


class Setup:
    def __init__(self, *, session_ms: int = 60_000) -> None:
        self.loader = MetadataLoader(MetadataImage(cluster_id="c"), asyncio.get_running_loop())
        self.quorum = FakeQuorum(self.loader)
        self.leading = True
        self.controller = ClusterQuorumController(
            self.loader, self.quorum.append, node_id=1, is_leader=lambda: self.leading,
            session_timeout_ms=session_ms, unclean_for=lambda _t: False)
        self.image = self.loader.image

    async def live_broker(self, broker_id: int) -> int:
        epoch = await self.controller.register_broker(info(broker_id), f"inc-{broker_id}")
        answer = await self.controller.heartbeat(broker_id, epoch, self.loader.applied_offset,
                                                 want_fence=False, want_shut_down=False)
        assert not answer.is_fenced
        return epoch

    async def three_brokers_one_topic(self) -> dict[int, int]:
        """Brokers 1-3 live, topic "t" of 3 partitions on all three: its partitions'
        leaders by partition."""
        for b in (1, 2, 3):
            await self.live_broker(b)
        topic = await self.controller.create_topic("t", 3, 3, None, {})
        return {p: st.leader for p, st in topic.partitions.items()}

    def silence(self, broker_id: int) -> None:
        """As if the broker's process had stopped heartbeating a session ago (killed)."""
        self.controller._last_seen[broker_id] -= 60.0
        self.controller._heard[broker_id] -= 60.0

    async def settle(self) -> None:
        """Run the active controller's reconciliation until it writes nothing more."""
        for _ in range(10):
            before = len(self.quorum.appended)
            await self.controller._expire_sessions()
            await self.controller._reconcile()
            if len(self.quorum.appended) == before:
                return
        raise AssertionError("the controller kept writing")


def test_a_new_registration_is_fenced_until_the_broker_caught_up() -> None:
    async def main() -> None:
        s = Setup()
        epoch = await s.controller.register_broker(info(2), "a")
        assert s.image.registrations[2].fenced and 2 not in s.image.brokers
        at = s.loader.applied_offset - 1  # the registration record is the last one applied
        behind = await s.controller.heartbeat(2, epoch, at - 1, want_fence=False,
                                              want_shut_down=False)
        assert behind.is_fenced and not behind.is_caught_up
        caught_up = await s.controller.heartbeat(2, epoch, at, want_fence=False,
                                                 want_shut_down=False)
        assert not caught_up.is_fenced and caught_up.is_caught_up
        assert 2 in s.image.brokers
        # the same process registering again (a lost answer) keeps its epoch
        assert await s.controller.register_broker(info(2), "a") == epoch
        # another process while this one heartbeats: refused (Kafka's duplicate check)
        with pytest.raises(KafkaError) as duplicate:
            await s.controller.register_broker(info(2), "b")
        assert duplicate.value.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
        # a new process once the old one fell silent gets a new epoch, and starts fenced again
        s.silence(2)
        again = await s.controller.register_broker(info(2), "b")
        assert again > epoch and 2 not in s.image.brokers
        with pytest.raises(KafkaError) as stale:
            await s.controller.heartbeat(2, epoch, 100, want_fence=False, want_shut_down=False)
        assert stale.value.code == ErrorCode.STALE_BROKER_EPOCH

    run(main)


def test_a_fenced_broker_loses_its_leaderships_and_leaves_the_isrs() -> None:
    async def main() -> None:
        s = Setup(session_ms=50)
        for b in (1, 2, 3):
            await s.live_broker(b)
        topic = await s.controller.create_topic("t", 3, 3, None, {})
        assert {p.leader for p in topic.partitions.values()} == {1, 2, 3}
        await asyncio.sleep(0.1)  # past the 50 ms session (the test's clock, not a sync)
        for b in (1, 3):  # broker 2 stays silent
            reg = s.image.registrations[b]
            await s.controller.heartbeat(b, reg.epoch, s.loader.applied_offset,
                                         want_fence=False, want_shut_down=False)
        await s.settle()
        assert s.image.registrations[2].fenced and 2 not in s.image.brokers
        for p in s.image.topics["t"].partitions.values():
            assert p.leader in (1, 3) and 2 not in p.isr, p

    run(main)


def test_a_new_process_of_a_leader_registers_with_its_leaderships_moved() -> None:
    """Kafka's unclean-shutdown handling, in the registration's own commit: no heartbeat of
    the new process can unfence it while the metadata still names it the leader its previous
    process was (the reconcile pass may not have run in between)."""
    async def main() -> None:
        s = Setup()
        leaders = await s.three_brokers_one_topic()
        led = [p for p, leader in leaders.items() if leader == 2]
        before = {p: st.leader_epoch for p, st in s.image.topics["t"].partitions.items()}
        commits = len(s.quorum.appended)
        s.silence(2)  # killed: its heartbeats stopped
        epoch = await s.controller.register_broker(info(2), "inc-2-again")
        # no reconcile pass ran: the registration call itself wrote the moves
        assert [r["type"] for r in s.quorum.appended[commits:]] == ["register_broker",
                                                                    *["partition"] * 3]
        for p, st in s.image.topics["t"].partitions.items():
            assert st.leader in (1, 3) and 2 not in st.isr, st
            if p in led:
                assert st.leader_epoch > before[p]
        # caught up at once: unfenced, it still leads nothing until elected again
        await s.controller.heartbeat(2, epoch, s.loader.applied_offset, want_fence=False,
                                     want_shut_down=False)
        assert 2 in s.image.brokers
        assert all(st.leader != 2 for st in s.image.topics["t"].partitions.values())

    run(main)


def test_the_controller_of_a_restarted_node_hands_nothing_to_its_old_registration() -> None:
    """A combined node's controller active before its broker registered again: the broker
    shows its old leaderships as leaderless; the registration of its node id is the previous
    process's, so no decision may give them back to it (it is elected after a new one)."""
    async def main() -> None:
        s = Setup()
        leaders = await s.three_brokers_one_topic()
        led = [p for p, leader in leaders.items() if leader == 1]
        assert led
        s.controller._local_incarnation = "this-process"  # node 1 restarted, not registered
        s.loader.hold_inherited_leaderships(1)  # what its broker does when it starts
        await s.settle()
        for p in led:
            st = s.image.topics["t"].partitions[p]
            assert st.leader in (2, 3) and 1 not in st.isr, st
        assert s.controller._live() == {2, 3}
        # no duplicate check for it: its old registration was heard a moment ago, but this
        # process is the only one with that id
        epoch = await s.controller.register_broker(info(1), "this-process")
        await s.controller.heartbeat(1, epoch, s.loader.applied_offset, want_fence=False,
                                     want_shut_down=False)
        assert s.controller._live() == {1, 2, 3}

    run(main)


def test_a_controlled_shutdown_moves_leaderships_then_fences() -> None:
    async def main() -> None:
        s = Setup()
        epochs = {b: await s.live_broker(b) for b in (1, 2, 3)}
        await s.controller.create_topic("t", 3, 3, None, {})
        first = await s.controller.heartbeat(2, epochs[2], s.loader.applied_offset,
                                             want_fence=False, want_shut_down=True)
        assert not first.should_shut_down  # it still leads a partition
        await s.settle()
        # recorded at once: leaders stop adding it to ISRs while it still fetches (KIP-841)
        reg = s.image.registrations[2]
        assert reg.in_controlled_shutdown and not reg.fenced and 2 in s.image.brokers
        assert not s.image.isr_eligible(2) and s.image.isr_eligible(1)
        assert all(p.leader != 2 and 2 not in p.isr
                   for p in s.image.topics["t"].partitions.values())
        state = next(iter(s.image.topics["t"].partitions.values()))
        with pytest.raises(KafkaError) as refused:  # it may not join an ISR again
            await s.controller.alter_isr("t", state.partition, state.leader_epoch,
                                         state.partition_epoch, [*state.isr, 2])
        assert refused.value.code == ErrorCode.INELIGIBLE_REPLICA
        done = await s.controller.heartbeat(2, epochs[2], s.loader.applied_offset,
                                            want_fence=False, want_shut_down=True)
        assert done.should_shut_down and done.is_fenced
        # told it may stop: its next process need not wait for it to fall silent
        assert await s.controller.register_broker(info(2), "inc-2-next") > epochs[2]

    run(main)


def test_isr_changes_are_compare_and_sets_and_only_on_the_active_controller() -> None:
    async def main() -> None:
        s = Setup()
        for b in (1, 2):
            await s.live_broker(b)
        await s.controller.create_topic("t", 1, 2, None, {})
        p = s.image.topics["t"].partitions[0]
        shrunk = await s.controller.alter_isr("t", 0, p.leader_epoch, p.partition_epoch,
                                              [p.leader])
        assert shrunk.isr == [p.leader] and shrunk.partition_epoch == p.partition_epoch + 1
        with pytest.raises(KafkaError) as stale:  # the old partition epoch
            await s.controller.alter_isr("t", 0, p.leader_epoch, p.partition_epoch, p.isr)
        assert stale.value.code == ErrorCode.INVALID_UPDATE_VERSION
        s.leading = False
        with pytest.raises(KafkaError) as not_controller:
            await s.controller.register_broker(info(3), "c")
        assert not_controller.value.code == ErrorCode.NOT_CONTROLLER

    run(main)


def test_a_reassignment_completes_once_its_targets_are_in_sync() -> None:
    async def main() -> None:
        s = Setup()
        for b in (1, 2, 3):
            await s.live_broker(b)
        await s.controller.create_topic("t", -1, -1, {0: [1, 2]}, {})
        result = await s.controller.alter_partition_reassignments({("t", 0): [1, 3]}, False)
        assert result[("t", 0)][0] == ErrorCode.NONE
        p = s.image.topics["t"].partitions[0]
        assert sorted(p.replicas) == [1, 2, 3]
        assert p.adding_replicas == [3] and p.removing_replicas == [2]
        await s.settle()
        assert s.image.topics["t"].partitions[0].reassigning  # 3 has not caught up yet
        p = s.image.topics["t"].partitions[0]
        await s.controller.alter_isr("t", 0, p.leader_epoch, p.partition_epoch, [*p.isr, 3])
        await s.settle()
        done = s.image.topics["t"].partitions[0]
        assert done.replicas == [1, 3] and sorted(done.isr) == [1, 3]
        assert not done.reassigning

    run(main)


def test_isr_changes_of_one_request_are_checked_each_and_committed_together() -> None:
    async def main() -> None:
        s = Setup()
        for b in (1, 2, 3):
            await s.live_broker(b)
        await s.controller.create_topic("t", 3, 3, None, {})
        states = s.image.topics["t"].partitions
        before, end = len(s.quorum.appended), s.quorum.end
        results = await s.controller.alter_isrs([
            ("t", p, states[p].leader_epoch, states[p].partition_epoch, [states[p].leader])
            for p in (0, 1)] + [
            ("t", 2, states[2].leader_epoch, states[2].partition_epoch + 5, [1, 2]),  # stale
            ("t", 0, states[0].leader_epoch, states[0].partition_epoch, [1, 2, 3]),  # twice
            ("nope", 0, 0, 0, [1])])
        # the two accepted changes: two records, appended by one commit
        assert len(s.quorum.appended) == before + 2 and s.quorum.end == end + 2
        assert [r["partition"] for r in s.quorum.appended[before:]] == [0, 1]
        assert [r.isr for r in results[:2]] == [  # type: ignore[union-attr]
            [states[0].leader], [states[1].leader]]
        assert [r.code for r in results[2:]] == [  # type: ignore[union-attr]
            ErrorCode.INVALID_UPDATE_VERSION, ErrorCode.INVALID_REQUEST,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]

    run(main)


def test_a_pass_with_nothing_changed_skips_the_walk_over_the_partitions(monkeypatch) -> None:
    """The reconcile loop runs every 0.5 s; it decides again only when the image, the live
    brokers or those shutting down changed."""
    from strom.controller import cluster_controller

    walks: list[int] = []
    real = cluster_controller.decide

    def counting(*args: Any, **kwargs: Any) -> Any:
        walks.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(cluster_controller, "decide", counting)

    async def main() -> None:
        s = Setup()
        for b in (1, 2, 3):
            await s.live_broker(b)
        await s.controller.create_topic("t", 3, 3, None, {})
        await s.settle()
        walks.clear()
        for _ in range(3):
            await s.controller._reconcile()
        assert walks == []  # nothing changed
        reg = s.image.registrations[2]
        await s.controller.heartbeat(2, reg.epoch, s.loader.applied_offset,
                                     want_fence=False, want_shut_down=True)
        await s.settle()  # broker 2 shuts down: decided again, its leaderships move
        assert walks and all(p.leader != 2 for p in s.image.topics["t"].partitions.values())

    run(main)
