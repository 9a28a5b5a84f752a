"""Kafka's small text files: offset checkpoints, leader-epoch checkpoint, partition.metadata.

All writes go to ``<file>.tmp`` then ``rename`` so a crash leaves the old or the new content,
never a torn file; ``fsync=True`` also makes the new content durable before the rename.

A file that cannot be read or parsed (empty, garbled, unreadable) reads as absent, with a WARN
naming it: everything in these files can be recovered from the logs, and deleting the file is
all an operator could do about it anyway. (Kafka reads an empty checkpoint as empty but stops
the log dir on a garbled one.)
"""

from __future__ import annotations

import base64
import logging
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

log = logging.getLogger(__name__)


def write_atomic(path: Path, text: str, *, fsync: bool = True, fsync_dir: bool = False) -> None:
    """``fsync_dir`` also makes the rename durable (an fsync of the directory), as Kafka does
    for its checkpoints; callers that run on the event loop leave it off."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            if fsync:
                f.flush()
                files.fsync(f.fileno())
        os.replace(tmp, path)
        if fsync_dir:
            fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                files.fsync(fd)
            finally:
                os.close(fd)
    except OSError as e:
        raise KafkaStorageError(f"cannot write {path}: {e}") from e


def _ignore(path: Path, why: object) -> None:
    log.warning("ignoring unreadable %s (%s): reading it as absent and recovering from the logs",
                path, why)  # fmt: skip


def _read_lines(path: Path) -> list[str] | None:
    """The file's lines; None when it is missing or cannot be read (the latter with a WARN)."""
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        _ignore(path, e)
        return None


def _parse_versioned(lines: list[str], fields: int) -> list[list[str]]:
    """Parse `0`, `count`, then `count` lines of ``fields`` space-separated values."""
    if not lines:
        raise ValueError("the file is empty")
    if lines[0].strip() != "0":
        raise ValueError(f"unsupported version {lines[0]!r}")
    count = int(lines[1]) if len(lines) > 1 else -1
    rows = [ln.split() for ln in lines[2 : 2 + count]] if count >= 0 else []
    if count < 0 or len(rows) != count or any(len(r) != fields for r in rows):
        raise ValueError("wrong number of entries")
    return rows


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """``topic partition offset`` entries; a missing or unreadable file is empty."""
    lines = _read_lines(path)
    if lines is None:
        return {}
    try:
        return {(t, int(p)): int(o) for t, p, o in _parse_versioned(lines, 3)}
    except ValueError as e:
        _ignore(path, e)
        return {}


def write_offset_checkpoint(
    path: Path, offsets: Mapping[tuple[str, int], int], *, fsync: bool = True
) -> None:
    body = "".join(f"{t} {p} {o}\n" for (t, p), o in offsets.items())
    write_atomic(path, f"0\n{len(offsets)}\n{body}", fsync=fsync)


def read_leader_epoch_checkpoint(path: Path) -> list[tuple[int, int]] | None:
    """``epoch startOffset`` entries; None when the file is missing or unreadable (the caller
    rebuilds the entries from the log)."""
    lines = _read_lines(path)
    if lines is None:
        return None
    try:
        entries = [(int(e), int(o)) for e, o in _parse_versioned(lines, 2)]
    except ValueError as e:
        _ignore(path, e)
        return None
    if any(e < 0 or o < 0 for e, o in entries):
        _ignore(path, "negative epoch or offset")
        return None
    return entries


def write_leader_epoch_checkpoint(
    path: Path, entries: Iterable[tuple[int, int]], *, fsync: bool = True,
    fsync_dir: bool = False,
) -> None:
    entries = list(entries)
    body = "".join(f"{e} {o}\n" for e, o in entries)
    write_atomic(path, f"0\n{len(entries)}\n{body}", fsync=fsync, fsync_dir=fsync_dir)


def topic_id_to_str(topic_id: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def topic_id_from_str(s: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    if len(raw) != 16:
        raise ValueError(f"invalid topic id {s!r}")
    return uuid.UUID(bytes=raw)


def read_partition_metadata(path: Path) -> uuid.UUID | None:
    """The partition's topic id; None when missing or unreadable (the broker's metadata then
    supplies the id, and the file is rewritten)."""
    lines = _read_lines(path)
    if not lines:  # missing, or left empty by a crash right after the partition was created
        return None
    try:
        fields = dict(ln.split(":", 1) for ln in lines if ln.strip())
        if fields["version"].strip() != "0":
            raise ValueError(f"unsupported version {fields['version']!r}")
        return topic_id_from_str(fields["topic_id"].strip())
    except KeyError as e:
        _ignore(path, f"no {e} field")
    except ValueError as e:
        _ignore(path, e)
    return None


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
