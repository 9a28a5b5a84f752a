"""Upgrade in place: a single node's metadata log becomes a one-voter KRaft log.

Before KRaft, a single Strom node kept its metadata in ``__cluster_metadata-0`` too: the same
JSON records in ordinary batches (all at leader epoch 0), and snapshots of its own format
(``<offset>.checkpoint``, `strom.cluster.metadata_snapshot`). The Raft log reads those
batches as they are (epoch 0 comes before the quorum's first epoch); only the snapshots need
converting, since the records below the newest one may be gone from the log. The newest
snapshot that passes its checks is rewritten as a Kafka snapshot at the same offset
(``<offset>-0000000000.checkpoint``) holding the image's records; the old files stay where
they are (nothing reads them any more, and nothing is deleted). When no old snapshot passes its
checks, the node refuses to start, naming the files: metadata is never guessed.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from strom.broker.wiring import StartupError
from strom.cluster import metadata_snapshot as legacy
from strom.cluster.records import image_records
from strom.controller.loader import snapshot_values
from strom.raft.snapshot import SnapshotId, snapshot_ids, write_snapshot

log = logging.getLogger("strom.controller.upgrade")


def upgrade_single_node_metadata(log_dir: Path) -> SnapshotId | None:
    """Convert the newest old-format snapshot of ``log_dir`` (the ``__cluster_metadata-0``
    directory) when the directory has no Kafka snapshot past the bootstrap one; returns the id
    written, None when there was nothing to convert."""
    if not log_dir.is_dir():
        return None
    old = legacy.snapshot_files(log_dir)
    if not old or any(sid.end_offset > 0 for sid in snapshot_ids(log_dir)):
        return None
    problems = []
    for path in reversed(old):
        try:
            image = legacy.read_snapshot(path)
        except (legacy.SnapshotDamaged, OSError, ValueError, KeyError) as e:
            problems.append(f"{path.name}: {e}")
            log.warning("old metadata snapshot %s cannot be used: %s", path, e)
            continue
        offset = legacy.snapshot_offset(path)
        sid = SnapshotId(offset, 0)
        write_snapshot(log_dir, sid, snapshot_values({}, image_records(image)),
                       last_contained_log_timestamp=int(path.stat().st_mtime * 1000),
                       timestamp=int(time.time() * 1000))
        log.info("upgraded the single node's metadata in %s to a KRaft log: snapshot %s "
                 "written from %s (%d topics); the old snapshot files are kept", log_dir,
                 sid, path.name, len(image.topics))
        return sid
    raise StartupError(f"cannot upgrade the metadata in {log_dir} to KRaft: no old snapshot "
                       f"passes its checks ({'; '.join(problems)}); see \"Metadata damage\" in "
                       f"docs/operations.md")
