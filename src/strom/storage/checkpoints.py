"""Kafka's small text files: offset checkpoints, leader-epoch checkpoint, partition.metadata.

All writes go to ``<file>.tmp`` then ``rename`` so a crash leaves the old or the new content,
never a torn file; ``fsync=True`` also makes the new content durable before the rename.
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

from strom.storage import files
from strom.storage.errors import KafkaStorageError

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
ZERO_UUID = uuid.UUID(int=0)


def write_atomic(path: Path, text: str, *, fsync: bool = True) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            if fsync:
                f.flush()
                files.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        raise KafkaStorageError(f"cannot write {path}: {e}") from e


def _read_lines(path: Path) -> list[str] | None:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None


def _parse_versioned(path: Path, lines: list[str], fields: int) -> list[list[str]]:
    """Parse `0`, `count`, then `count` lines of ``fields`` space-separated values."""
    try:
        if int(lines[0]) != 0:
            raise ValueError(f"unsupported version {lines[0]!r}")
        count = int(lines[1])
        rows = [ln.split() for ln in lines[2 : 2 + count]]
        if len(rows) != count or any(len(r) != fields for r in rows):
            raise ValueError("wrong number of entries")
        return rows
    except (ValueError, IndexError) as e:
        raise KafkaStorageError(f"malformed checkpoint file {path}: {e}") from e


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """``topic partition offset`` entries; a missing file is empty."""
    lines = _read_lines(path)
    if lines is None:
        return {}
    try:
        return {(t, int(p)): int(o) for t, p, o in _parse_versioned(path, lines, 3)}
    except ValueError as e:
        raise KafkaStorageError(f"malformed checkpoint file {path}: {e}") from e


def write_offset_checkpoint(
    path: Path, offsets: Mapping[tuple[str, int], int], *, fsync: bool = True
) -> None:
    body = "".join(f"{t} {p} {o}\n" for (t, p), o in offsets.items())
    write_atomic(path, f"0\n{len(offsets)}\n{body}", fsync=fsync)


def read_leader_epoch_checkpoint(path: Path) -> list[tuple[int, int]]:
    """``epoch startOffset`` entries; a missing file is empty."""
    lines = _read_lines(path)
    if lines is None:
        return []
    try:
        return [(int(e), int(o)) for e, o in _parse_versioned(path, lines, 2)]
    except ValueError as e:
        raise KafkaStorageError(f"malformed checkpoint file {path}: {e}") from e


def write_leader_epoch_checkpoint(
    path: Path, entries: Iterable[tuple[int, int]], *, fsync: bool = True
) -> None:
    entries = list(entries)
    body = "".join(f"{e} {o}\n" for e, o in entries)
    write_atomic(path, f"0\n{len(entries)}\n{body}", fsync=fsync)


def topic_id_to_str(topic_id: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def topic_id_from_str(s: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    if len(raw) != 16:
        raise ValueError(f"invalid topic id {s!r}")
    return uuid.UUID(bytes=raw)


def read_partition_metadata(path: Path) -> uuid.UUID | None:
    lines = _read_lines(path)
    if not lines:  # missing, or left empty by a crash right after the partition was created
        return None
    try:
        fields = dict(ln.split(":", 1) for ln in lines if ln.strip())
        if fields["version"].strip() != "0":
            raise ValueError(f"unsupported version {fields['version']!r}")
        return topic_id_from_str(fields["topic_id"].strip())
    except (KeyError, ValueError) as e:
        raise KafkaStorageError(f"malformed {path}: {e}") from e


def write_partition_metadata(
    path: Path, topic_id: uuid.UUID, *, fsync: bool = False, fresh: bool = False
) -> None:
    """``fresh``: the directory is new, so the file is written in place (no temporary file and
    rename): a crash can only leave it empty, which reads as "no topic id yet"."""
    text = f"version: 0\ntopic_id: {topic_id_to_str(topic_id)}\n"
    if not fresh:
        write_atomic(path, text, fsync=fsync)
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as e:
        raise KafkaStorageError(f"cannot write {path}: {e}") from e
