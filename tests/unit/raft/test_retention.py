"""metadata.max.retention.bytes/.ms (Kafka's names): old snapshots and the log below the next one
go once the log and its snapshots outgrow the limit, or a snapshot's last record is too old;
the latest snapshot always stays, and a replica that needs what went gets that snapshot."""

from __future__ import annotations

from pathlib import Path

from tests.unit.raft.sim import SimNetwork
from tests.unit.raft.test_storage import SimDiskLog, _on_disk

from strom.raft.types import OffsetAndEpoch

DAY_MS = 24 * 3600 * 1000


def _three_snapshots(tmp_path: Path) -> tuple[SimNetwork, int, list[OffsetAndEpoch]]:
    net = _on_disk(SimNetwork(3, [1, 2, 3]), tmp_path)
    assert net.run_for(5000, lambda: net.leader() is not None), net.states()
    leader = net.leader()
    assert leader is not None
    net.schedule_appends(net.clock.now + 6000, every_ms=(5, 15))
    made = []
    for _ in range(3):
        net.run_for(1500)
        sid = net.snapshot(leader, trim=False)
        assert sid is not None
        made.append(sid)
    return net, leader, made


def test_over_the_byte_limit_only_the_latest_snapshot_stays(tmp_path: Path) -> None:
    net, leader, made = _three_snapshots(tmp_path)
    client = net.nodes[leader].client
    assert client is not None
    assert client.log.snapshot_ids()[-3:] == made
    before = client.log.size_bytes()
    assert client.enforce_retention(before, -1) == 0  # within the limit: nothing goes
    assert client.enforce_retention(1, -1) >= 2
    assert client.log.snapshot_ids() == [made[-1]]
    assert client.log.start_offset() == made[-1].offset
    assert client.log.size_bytes() < before
    # a replica with an empty log catches up from the snapshot the leader kept
    net.add_observer(50, log=SimDiskLog.at(tmp_path / "node-50"))  # type: ignore[arg-type]
    net.run_for(3000)
    observer = net.nodes[50].client
    assert observer is not None and observer.high_watermark == client.high_watermark
    net.check_logs_agree()


def test_snapshots_older_than_the_time_limit_go(tmp_path: Path) -> None:
    net, leader, made = _three_snapshots(tmp_path)
    client = net.nodes[leader].client
    assert client is not None
    # the simulation's clock starts at 0: its records are "written" in January 1970
    assert client.enforce_retention(-1, DAY_MS, now_ms=net.clock.now) == 0
    assert client.enforce_retention(-1, DAY_MS, now_ms=net.clock.now + 2 * DAY_MS) >= 2
    assert client.log.snapshot_ids() == [made[-1]]
    assert client.enforce_retention(-1, 1, now_ms=net.clock.now + 3 * DAY_MS) == 0  # the last stays
