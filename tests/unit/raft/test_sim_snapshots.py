"""Snapshots in the Raft core (KIP-630): the snapshot bytes, the memory log's snapshot
operations, the follower's FetchSnapshot download driven by hand, and simulations where
replicas catch up from a snapshot the others made after trimming their logs, where the
snapshot goes away mid-download, and random faults with snapshotting on."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from tests.unit.raft.harness import CLUSTER, Harness, leader, log_with, partition
from tests.unit.raft.sim import SimNetwork, _Envelope, random_faults

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.raft import messages as m
from strom.raft.log import (
    MemoryRaftLog,
    SnapshotContent,
    load_snapshot,
    parse_snapshot,
    snapshot_chunks,
    validate_offset_and_epoch,
)
from strom.raft.quorum_state import ElectionState
from strom.raft.snapshot import SnapshotCorruptError, SnapshotId, write_snapshot
from strom.raft.types import (
    DataRecord,
    FatalRaftError,
    OffsetAndEpoch,
    RaftBatch,
    RaftSettings,
    ReplicaKey,
    ValidKind,
    leader_change_record,
)

E = ErrorCode
# snapshots of a few KiB take many FetchSnapshots: controller.quorum.fetch.snapshot.max.bytes
# (KIP-1219) sizes their chunks, not controller.quorum.fetch.max.bytes
SMALL = RaftSettings(fetch_max_bytes=1 << 20, fetch_snapshot_max_bytes=512)
OBSERVER = 100


# ----------------------------------------------------------------------------- the bytes


@pytest.mark.parametrize("max_batch_bytes", [8 << 20, 100])
def test_snapshot_bytes_are_what_the_file_writer_writes(tmp_path: Path,
                                                        max_batch_bytes: int) -> None:
    values = [f"value-{i}".encode() * (i % 4 + 1) for i in range(40)]
    sid = OffsetAndEpoch(57, 3)
    path = write_snapshot(tmp_path, SnapshotId(57, 3), values, last_contained_log_timestamp=99,
                          timestamp=1234)
    chunks = list(snapshot_chunks(sid, values, last_contained_log_timestamp=99,
                                  timestamp=1234, max_batch_bytes=max_batch_bytes))
    if max_batch_bytes == 8 << 20:
        assert b"".join(chunks) == path.read_bytes()
    else:
        assert len(chunks) > 10  # the header, many small data batches, the footer
    content = parse_snapshot(sid, b"".join(chunks))
    assert content == SnapshotContent(sid, 99, tuple(values))


def test_an_empty_state_makes_a_header_and_a_footer() -> None:
    sid = OffsetAndEpoch(1, 1)
    data = b"".join(snapshot_chunks(sid, [], last_contained_log_timestamp=0, timestamp=0))
    assert parse_snapshot(sid, data).values == ()


def test_damaged_snapshot_bytes_are_refused() -> None:
    sid = OffsetAndEpoch(5, 1)
    chunks = list(snapshot_chunks(sid, [b"a", b"b"], last_contained_log_timestamp=0,
                                  timestamp=0))
    data = b"".join(chunks)
    flipped = bytearray(data)
    flipped[len(chunks[0]) + 70] ^= 0xFF
    for bad in (data[:-5], bytes(flipped), b"".join(chunks[1:]), b"".join(chunks[:-1]),
                data + chunks[-1]):
        with pytest.raises(SnapshotCorruptError):
            parse_snapshot(sid, bad)


# ----------------------------------------------------------------------------- the memory log


def _snapshot(log: MemoryRaftLog, sid: OffsetAndEpoch, values: list[bytes]) -> None:
    writer = log.new_snapshot(sid)
    assert writer is not None
    for chunk in snapshot_chunks(sid, values, last_contained_log_timestamp=0, timestamp=0):
        writer.append(chunk)
    assert log.read_snapshot(sid) is None  # invisible until frozen
    writer.freeze()


def test_the_memory_log_starts_at_a_snapshot() -> None:
    log = log_with((1, 3), (2, 4), (4, 3))  # epoch 1: 0-2, epoch 2: 3-6, epoch 4: 7-9
    log.update_high_watermark(10)
    sid = OffsetAndEpoch(7, 2)
    _snapshot(log, sid, [b"x"])
    assert log.new_snapshot(sid) is None  # it exists
    assert log.start_offset() == 0 and log.latest_snapshot_id() == sid
    assert validate_offset_and_epoch(log, 0, 0).kind is ValidKind.VALID  # the log starts at 0
    assert log.delete_before_snapshot(sid)
    assert not log.delete_before_snapshot(sid)  # already there
    assert (log.start_offset(), log.end_offset()) == (7, 10)
    assert [b.base_offset for b in log.read_batches(0, 10)] == [7, 8]
    # Below the start, at it in another epoch, or older than the oldest snapshot: the latest
    # snapshot is the answer.
    for offset, epoch in ((3, 2), (7, 1), (8, 1)):
        valid = validate_offset_and_epoch(log, offset, epoch)
        assert (valid.kind, valid.offset_and_epoch) == (ValidKind.SNAPSHOT, sid)
    assert validate_offset_and_epoch(log, 7, 2).kind is ValidKind.VALID
    assert validate_offset_and_epoch(log, 9, 4).kind is ValidKind.VALID
    valid = validate_offset_and_epoch(log, 8, 3)  # epoch 3 never happened here
    assert (valid.kind, valid.offset_and_epoch) == (ValidKind.DIVERGING, sid)
    assert log.end_offset_for_epoch(2) == sid
    # A second snapshot, then trimming to it forgets the first.
    _snapshot(log, OffsetAndEpoch(10, 4), [b"x", b"y"])
    assert log.earliest_snapshot_id() == sid
    assert log.delete_before_snapshot(OffsetAndEpoch(10, 4))
    assert log.earliest_snapshot_id() == OffsetAndEpoch(10, 4)
    assert (log.start_offset(), log.end_offset(), log.last_fetched_epoch()) == (10, 10, 4)
    content = load_snapshot(log, OffsetAndEpoch(10, 4))
    assert content is not None and content.values == (b"x", b"y")


def test_trimming_stops_at_the_high_watermark_and_the_latest_snapshot() -> None:
    log = log_with((1, 6))
    log.update_high_watermark(3)
    writer = log.new_snapshot(OffsetAndEpoch(6, 1))  # as if downloaded: not checked here
    assert writer is not None
    writer.append(b"".join(snapshot_chunks(OffsetAndEpoch(6, 1), [], timestamp=0,
                                           last_contained_log_timestamp=0)))
    writer.freeze()
    assert not log.delete_before_snapshot(OffsetAndEpoch(6, 1))  # above the HW
    assert not log.delete_before_snapshot(OffsetAndEpoch(3, 1))  # no such snapshot


def test_installing_a_downloaded_snapshot_restarts_the_log() -> None:
    log = log_with((1, 4))
    log.update_high_watermark(2)
    sid = OffsetAndEpoch(20, 3)
    _snapshot(log, sid, [b"s"])
    log.install_snapshot(sid)
    assert (log.start_offset(), log.end_offset(), log.last_fetched_epoch(),
            log.high_watermark(), log.flushed_offset()) == (20, 20, 3, 20, 20)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(20, 3)
    log.append_as_follower((RaftBatch(20, 5, (leader_change_record(1, [1], [1]),)),))
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(20, 3)
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(21, 5)
    with pytest.raises(ValueError):
        log.install_snapshot(OffsetAndEpoch(30, 5))  # not stored


def test_a_crash_loses_a_snapshot_being_written_and_opens_at_a_snapshot_past_the_end() -> None:
    log = log_with((1, 4))
    half = log.new_snapshot(OffsetAndEpoch(2, 1))
    assert half is not None
    half.append(b"partial")
    log.crash()
    with pytest.raises(ValueError):
        half.freeze()
    assert log.latest_snapshot_id() is None
    # An observer's unflushed records go in a crash, but its snapshot of them stays.
    log.update_high_watermark(4)
    log.append_as_follower((RaftBatch(4, 1, (DataRecord(b"u"),)),))
    log.update_high_watermark(5)
    _snapshot(log, OffsetAndEpoch(5, 1), [b"u"])
    log.crash(lose_unflushed=True)
    assert (log.start_offset(), log.end_offset(), log.last_fetched_epoch()) == (5, 5, 1)


# ----------------------------------------------------------------------------- by hand


def _follower(node_id: int = 2, settings: RaftSettings | None = None) -> Harness:
    """A follower of leader 1 in epoch 3 with an empty log."""
    return Harness(node_id, stored=ElectionState(3, leader_id=1), settings=settings)


class _Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def handle_commit(self, batches: list[RaftBatch]) -> None:
        self.events.extend(("commit", b.base_offset) for b in batches)

    def handle_load_snapshot(self, snapshot: SnapshotContent) -> None:
        self.events.append(("load", snapshot))

    def handle_leader_change(self, leader: Any) -> None:
        pass


def _fetch_answer(snapshot_id: OffsetAndEpoch | None = None, records: Any = None,
                  hw: int = 0) -> dict[str, Any]:
    return m.fetch_response(error=E.NONE, leader_id=1, epoch=3, high_watermark=hw,
                            log_start_offset=0, records=records, snapshot_id=snapshot_id,
                            nodes=[])


def _snapshot_answer(sid: OffsetAndEpoch, data: bytes, position: int, max_bytes: int,
                     error: ErrorCode = E.NONE) -> dict[str, Any]:
    return m.fetch_snapshot_response(error=error, leader_id=1, epoch=3, snapshot_id=sid,
                                     size=len(data), position=position,
                                     chunk=data[position:position + max_bytes], nodes=[])


def _request_partition(ob: Any) -> dict[str, Any]:
    part: dict[str, Any] = ob.request["topics"][0]["partitions"][0]
    return part


def test_a_follower_downloads_installs_and_loads_a_snapshot_then_reads_the_log() -> None:
    h = _follower(settings=SMALL)
    rec = _Recorder()
    h.client.register(rec)
    sid = OffsetAndEpoch(300, 2)
    values = [f"v{i}".encode() * 10 for i in range(60)]
    data = b"".join(snapshot_chunks(sid, values, last_contained_log_timestamp=7, timestamp=0))
    [ob] = h.poll()
    assert ob.api_key == ApiKey.FETCH
    h.respond(ob, _fetch_answer(snapshot_id=sid, hw=310))
    positions = []
    while True:
        [ob] = h.poll()
        if ob.api_key != ApiKey.FETCH_SNAPSHOT:
            break
        part = _request_partition(ob)
        assert part["snapshot_id"] == {"end_offset": 300, "epoch": 2}
        assert part["current_leader_epoch"] == 3 and ob.request["replica_id"] == 2
        positions.append(part["position"])
        h.respond(ob, _snapshot_answer(sid, data, part["position"], ob.request["max_bytes"]))
        assert h.client.high_watermark is None or h.client.high_watermark == 300
    assert positions == list(range(0, len(data), 512)) and len(positions) > 3
    assert (h.log.start_offset(), h.log.end_offset(), h.client.high_watermark) == (300, 300, 300)
    # Installed; the listener loads it at the poll that sends the next Fetch, before any commit.
    assert rec.events[0][0] == "load" and rec.events[0][1].values == tuple(values)
    fetch = m.fetch_partition(ob.request)
    assert fetch is not None
    assert (fetch["fetch_offset"], fetch["last_fetched_epoch"]) == (300, 2)
    batch = RaftBatch(300, 3, (leader_change_record(1, [1, 2, 3], [1, 2]),))
    h.respond(ob, _fetch_answer(records=(batch,), hw=301))
    h.poll()
    assert rec.events[1:] == [("commit", 300)]


def test_a_snapshot_gone_from_the_leader_ends_the_download_and_the_follower_fetches_again() -> None:
    h = _follower(settings=SMALL)
    old, new = OffsetAndEpoch(100, 1), OffsetAndEpoch(200, 2)
    data = b"".join(snapshot_chunks(old, [b"x" * 40] * 40, last_contained_log_timestamp=0,
                                    timestamp=0))
    [ob] = h.poll()
    h.respond(ob, _fetch_answer(snapshot_id=old))
    [ob] = h.poll()
    h.respond(ob, _snapshot_answer(old, data, 0, 512))
    [ob] = h.poll()
    assert _request_partition(ob)["position"] == 512
    h.respond(ob, m.fetch_snapshot_response(error=E.SNAPSHOT_NOT_FOUND, leader_id=1, epoch=3,
                                            nodes=[]))
    assert h.state.name == "Follower" and h.state.fetching_snapshot is None
    [ob] = h.poll()
    assert ob.api_key == ApiKey.FETCH  # and it starts over from what the leader names now
    h.respond(ob, _fetch_answer(snapshot_id=new))
    [ob] = h.poll()
    assert ob.api_key == ApiKey.FETCH_SNAPSHOT and _request_partition(ob)["position"] == 0
    assert _request_partition(ob)["snapshot_id"] == {"end_offset": 200, "epoch": 2}


def test_a_chunk_with_the_wrong_id_or_position_is_an_invariant_violation() -> None:
    sid = OffsetAndEpoch(100, 1)
    data = b"".join(snapshot_chunks(sid, [b"x" * 40] * 40, last_contained_log_timestamp=0,
                                    timestamp=0))
    for answer in (_snapshot_answer(OffsetAndEpoch(100, 2), data, 0, 512),
                   _snapshot_answer(sid, data, 512, 512)):
        h = _follower(settings=SMALL)
        [ob] = h.poll()
        h.respond(ob, _fetch_answer(snapshot_id=sid))
        [ob] = h.poll()
        with pytest.raises(FatalRaftError):
            h.respond(ob, answer)


def test_a_new_epoch_drops_the_download() -> None:
    h = _follower(settings=SMALL)
    sid = OffsetAndEpoch(100, 1)
    [ob] = h.poll()
    h.respond(ob, _fetch_answer(snapshot_id=sid))
    assert h.client._snapshot_download is not None
    h.request(ApiKey.BEGIN_QUORUM_EPOCH, m.begin_quorum_epoch_request(
        cluster_id=CLUSTER, voter=ReplicaKey(2), leader_id=3, epoch=4, leader_endpoints=()))
    assert h.client._snapshot_download is None and h.log.latest_snapshot_id() is None
    [ob] = h.poll()
    assert ob.api_key == ApiKey.FETCH and ob.destination == 3


def test_the_leader_sends_a_snapshot_below_its_log_start_and_serves_it() -> None:
    h = leader(epoch=3, log=log_with((1, 5), (2, 5)))
    rec = _Recorder()
    h.client.register(rec)
    for follower in (2, 3):  # both fetch up to the leader's end: the HW follows
        h.request(ApiKey.FETCH, m.fetch_request(
            cluster_id=CLUSTER, replica=ReplicaKey(follower), epoch=3, fetch_offset=11,
            last_fetched_epoch=3, high_watermark=None, max_wait_ms=0, max_bytes=1 << 20))
    h.poll()
    assert h.client.high_watermark == 11
    with pytest.raises(ValueError):
        h.client.create_snapshot(12, [])  # above the HW
    sid = h.client.create_snapshot(10, [b"state"], now_ms=5)
    assert sid == OffsetAndEpoch(10, 2)
    assert h.client.create_snapshot(10, [b"state"]) is None  # made already
    assert h.client.trim_log() and h.log.start_offset() == 10
    assert h.client.create_snapshot(10, [b"state"]) is None  # the log starts there
    p = partition(h.request(ApiKey.FETCH, m.fetch_request(
        cluster_id=CLUSTER, replica=ReplicaKey(2), epoch=3, fetch_offset=4, last_fetched_epoch=1,
        high_watermark=None, max_wait_ms=500, max_bytes=1 << 20)))
    assert p["snapshot_id"] == {"end_offset": 10, "epoch": 2} and p["records"] is None
    snap = {"cluster_id": CLUSTER, "replica_id": 2, "max_bytes": 1 << 20, "topics": [{
        "name": "__cluster_metadata", "partitions": [{
            "partition": 0, "current_leader_epoch": 3, "position": 0,
            "snapshot_id": {"end_offset": 10, "epoch": 2}}]}]}
    p = partition(h.request(ApiKey.FETCH_SNAPSHOT, snap))
    content = parse_snapshot(OffsetAndEpoch(10, 2), bytes(p["unaligned_records"]))
    assert p["size"] == len(p["unaligned_records"]) and content.values == (b"state",)
    # A wrong topic names no leader at partition level (Kafka's answer).
    snap["topics"][0]["name"] = "other"
    p = partition(h.request(ApiKey.FETCH_SNAPSHOT, snap))
    assert p["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
    assert p["current_leader"] == {"leader_id": -1, "leader_epoch": -1}


def test_a_new_listener_starts_from_the_latest_snapshot() -> None:
    log = log_with((1, 5), (2, 5))
    log.update_high_watermark(10)
    _snapshot(log, OffsetAndEpoch(5, 2), [b"five"])  # the log still starts at 0
    log.crash()
    h = leader(epoch=3, log=log)
    rec = _Recorder()
    h.client.register(rec)
    for follower in (2, 3):
        h.request(ApiKey.FETCH, m.fetch_request(
            cluster_id=CLUSTER, replica=ReplicaKey(follower), epoch=3, fetch_offset=11,
            last_fetched_epoch=3, high_watermark=None, max_wait_ms=0, max_bytes=1 << 20))
    h.poll()
    assert rec.events[0][0] == "load" and rec.events[0][1].values == (b"five",)
    assert rec.events[1:] == [("commit", 5), ("commit", 6), ("commit", 10)]


# ----------------------------------------------------------------------------- simulations


def _elect(net: SimNetwork) -> int:
    assert net.run_for(5000, lambda: net.leader() is not None), net.states()
    lead = net.leader()
    assert lead is not None
    return lead


def _assert_same_state(net: SimNetwork) -> None:
    """Every live node's state machine holds the committed state at the leader's HW."""
    lead = net.leader()
    assert lead is not None, net.states()
    client = net.nodes[lead].client
    assert client is not None and client.high_watermark is not None
    expected = net.history.state_at(client.high_watermark)
    for node in net.nodes.values():
        assert node.client is not None and node.listener is not None, net.states()
        assert node.client.high_watermark == client.high_watermark, (node.id, net.states())
        assert node.listener.next_offset == client.high_watermark
        assert node.listener.values == expected, node.id
    net.check_logs_agree()


def _snapshot_everywhere(net: SimNetwork) -> None:
    for i in net.alive():
        net.snapshot(i)


def test_a_node_down_while_the_others_trimmed_catches_up_from_a_snapshot_then_the_log() -> None:
    net = SimNetwork(3, [1, 2, 3], settings=SMALL).start()
    lead = _elect(net)
    net.schedule_appends(net.clock.now + 9000, every_ms=(5, 20))
    net.run_for(1000)
    down = next(i for i in (1, 2, 3) if i != lead)
    net.crash(down, lose_unflushed=True)
    net.run_for(3000)
    _snapshot_everywhere(net)
    net.run_for(2000)  # the log goes on past the snapshot
    starts = [net.nodes[i].log.start_offset() for i in net.alive()]
    assert min(starts) > net.nodes[down].log.end_offset()
    net.restart(down)
    net.run_for(6000)
    assert net.sent.get((down, ApiKey.FETCH_SNAPSHOT), 0) > 3  # many chunks
    assert any(node == down for node, _ in net.history.snapshots_loaded)
    assert net.nodes[down].log.start_offset() in starts
    net.run_for(1000)  # the writer stopped: all settle on one HW
    _assert_same_state(net)


def test_a_brand_new_observer_catches_up_over_the_wire() -> None:
    net = SimNetwork(4, [1, 2, 3], settings=SMALL, wire=True).start()
    _elect(net)
    net.schedule_appends(net.clock.now + 6000, every_ms=(5, 20))
    net.run_for(2000)
    _snapshot_everywhere(net)
    net.run_for(1000)
    net.add_observer(OBSERVER)
    net.run_for(4000)
    assert net.sent.get((OBSERVER, ApiKey.FETCH_SNAPSHOT), 0) > 3
    assert [sid for node, sid in net.history.snapshots_loaded if node == OBSERVER]
    net.run_for(1000)
    _assert_same_state(net)


def test_a_snapshot_deleted_during_its_download_is_fetched_anew() -> None:
    net = SimNetwork(5, [1, 2, 3], settings=SMALL).start()
    lead = _elect(net)
    net.schedule_appends(net.clock.now + 8000, every_ms=(5, 20))
    net.run_for(2000)
    _snapshot_everywhere(net)
    net.run_for(500)
    not_found: list[int] = []
    replaced: list[Any] = []

    def watch(env: _Envelope) -> None:
        if env.api_key != ApiKey.FETCH_SNAPSHOT:
            return
        part = env.message["topics"][0]["partitions"][0]
        if env.is_request and env.src == OBSERVER and part["position"] >= 2048 and not replaced:
            replaced.append(net.snapshot(lead))  # a newer snapshot; the one downloaded goes
        elif not env.is_request and part["error_code"] == E.SNAPSHOT_NOT_FOUND:
            not_found.append(env.dst)

    net.watchers.append(watch)
    net.add_observer(OBSERVER)
    net.run_for(5000)
    assert replaced and replaced[0] is not None
    assert not_found == [OBSERVER]
    loaded = [sid for node, sid in net.history.snapshots_loaded if node == OBSERVER]
    assert loaded == [replaced[0]]
    net.run_for(1000)
    _assert_same_state(net)


def _chaos_with_snapshots(seed: int, duration_ms: int = 12_000) -> SimNetwork:
    rng = random.Random(seed * 7919 + 7)
    voters = list(range(1, rng.choice([3, 3, 5]) + 1))
    net = SimNetwork(seed, voters, observers=[OBSERVER], drop_rate=rng.choice([0.0, 0.02, 0.1]),
                     max_delay_ms=rng.choice([2, 5, 30]), wire=seed % 4 == 0,
                     settings=RaftSettings(fetch_max_bytes=rng.choice([300, 4096]),
                                           fetch_snapshot_max_bytes=rng.choice([300, 4096]))
                     ).start()
    net.schedule_appends(duration_ms)
    net.schedule_snapshots(duration_ms)
    random_faults(net, rng, voters, duration_ms)
    return net


@pytest.mark.parametrize("seed", range(10))
def test_safety_under_random_faults_with_snapshots(seed: int) -> None:
    net = _chaos_with_snapshots(seed)
    assert net.snapshots_made
    net.heal()
    net.drop_rate = 0.0
    for i in list(net.nodes):
        if net.nodes[i].client is None:
            net.restart(i)
    net.schedule_appends(net.clock.now + 2000)  # a fresh entry commits everything before it
    net.run_for(10_000)
    _assert_same_state(net)
