"""Metadata snapshot files (`<offset>.checkpoint` in `__cluster_metadata-0`) and their checks.

A snapshot is three lines: a header naming the format and the offset it was taken at, the
image as JSON, and a trailer with the image's length in bytes and its CRC32C. A file cut short,
emptied or garbled anywhere fails the check, even where what is left still parses as JSON.
Snapshots written before this format (one JSON document, no trailer) are still read; only a
full parse vouches for those.

Also here: finding metadata records in the side files storage recovery leaves
(`<segment>.log.corrupt-<ms>`), so the metadata log can tell a torn last batch from records cut
out of its middle.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from crc32c import crc32c

from strom.cluster.image import MetadataImage
from strom.record import (
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
    crc_ok,
    read_header,
)

SNAPSHOT_SUFFIX = ".checkpoint"
DAMAGED_SUFFIX = ".damaged"  # a damaged snapshot set aside by a start that did without it
FORMAT = "strom-metadata-snapshot"
VERSION = 2
_HEADER_START = b'{"format":"' + FORMAT.encode() + b'"'
_MAGIC_AT = 16  # where a v2 batch header holds its magic byte
_MAGIC = bytes([MAGIC_V2])


class SnapshotDamaged(Exception):
    """A snapshot file fails its checks; the message says how."""


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offset(path: Path) -> int:
    return int(path.name[:20])


def snapshot_files(directory: Path) -> list[Path]:
    """The snapshot files of `directory`, oldest first."""
    return sorted(p for p in directory.glob(f"*{SNAPSHOT_SUFFIX}")
                  if len(p.name) == 20 + len(SNAPSHOT_SUFFIX) and p.name[:20].isdigit())


def write_snapshot(path: Path, offset: int, data: dict[str, Any]) -> None:
    """Encode, write and fsync a snapshot (any thread), then move it into place. Encoded
    piece by piece: one C-level json.dumps of a large image would hold the GIL (and stall the
    loop) for tens of milliseconds."""
    tmp = path.with_suffix(".tmp")
    header = json.dumps({"format": FORMAT, "version": VERSION, "offset": offset},
                        separators=(",", ":")).encode()
    crc = length = 0
    with open(tmp, "wb") as f:
        f.write(header + b"\n")
        for chunk in json.JSONEncoder().iterencode(data):  # ASCII only: no newline inside
            piece = chunk.encode()
            crc = crc32c(piece, crc)
            length += len(piece)
            f.write(piece)
        trailer = json.dumps({"length": length, "crc32c": crc}, separators=(",", ":"))
        f.write(b"\n" + trailer.encode() + b"\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a crash
    finally:
        os.close(fd)


def _image_bytes(raw: bytes, offset: int) -> bytes | None:
    """The image's JSON bytes of a snapshot that passes the framing and CRC checks; None for a
    snapshot of the older format (a full parse is its only check)."""
    if not raw:
        raise SnapshotDamaged("the file is empty")
    if not raw.startswith(_HEADER_START):
        if raw[:1] == b"{" and b"\n" not in raw:
            return None
        raise SnapshotDamaged("it does not begin with a snapshot header")
    lines = raw.split(b"\n")
    if len(lines) != 4 or lines[3]:
        raise SnapshotDamaged(f"it has {len(raw)} bytes in {len(lines) - 1} complete lines, not "
                              "a header, the image and a trailer (cut short?)")
    try:
        header, trailer = json.loads(lines[0]), json.loads(lines[2])
        version, at = header["version"], header["offset"]
        length, crc = trailer["length"], trailer["crc32c"]
    except (ValueError, KeyError, TypeError) as exc:
        raise SnapshotDamaged(f"unreadable header or trailer: {exc}") from None
    if version != VERSION:
        raise SnapshotDamaged(f"format version {version} is not {VERSION}")
    if at != offset:
        raise SnapshotDamaged(f"its header says offset {at}, its name {offset}")
    image = lines[1]
    if len(image) != length or crc32c(image) != crc:
        raise SnapshotDamaged(f"the image has {len(image)} bytes and CRC32C {crc32c(image)}, "
                              f"the trailer says {length} bytes and {crc}")
    return image


def check_snapshot(path: Path) -> None:
    """Raise SnapshotDamaged unless the file is whole (framing and CRC; the older format is
    parsed). Cheap enough to vouch for the fallback snapshot at every start."""
    raw = _read(path)
    if _image_bytes(raw, snapshot_offset(path)) is None:
        read_snapshot_data(path)


def read_snapshot_data(path: Path) -> dict[str, Any]:
    """The snapshot's image as plain data, after every check."""
    raw = _read(path)
    image = _image_bytes(raw, snapshot_offset(path))
    try:
        data = json.loads(raw if image is None else image)
    except ValueError as exc:
        raise SnapshotDamaged(f"the image is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SnapshotDamaged("the image is not a JSON object")
    return data


def read_snapshot(path: Path) -> MetadataImage:
    """The image a snapshot holds; SnapshotDamaged if the file fails any check."""
    data = read_snapshot_data(path)
    try:
        return MetadataImage.from_snapshot(data)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SnapshotDamaged(f"the image is incomplete: {type(exc).__name__}: {exc}") from None


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise SnapshotDamaged(f"cannot read it: {exc}") from None


def set_aside(path: Path) -> Path:
    """Rename a damaged snapshot out of the way (kept for inspection, never loaded again)."""
    target = path.with_name(path.name + DAMAGED_SUFFIX)
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}{DAMAGED_SUFFIX}-{n}")
    os.rename(path, target)
    return target


def batches_in(path: Path) -> tuple[int, int] | None:
    """(first, last) offset of the complete, CRC-valid v2 batches anywhere in `path` (a side
    file of cut bytes); None when it holds none: a torn last batch, not lost records. Every
    position is tried, since a garbled length hides where the next batch begins."""
    data = path.read_bytes()
    found: tuple[int, int] | None = None
    start = _MAGIC_AT
    while True:
        at = data.find(_MAGIC, start)
        if at < 0:
            return found
        pos = at - _MAGIC_AT
        start = at + 1
        if pos + RECORD_BATCH_OVERHEAD > len(data):
            continue
        h = read_header(data, pos)
        if h.length < MIN_BATCH_LENGTH or pos + LOG_OVERHEAD + h.length > len(data):
            continue
        if not crc_ok(data, pos, h):
            continue
        last = h.base_offset + h.last_offset_delta
        found = (h.base_offset, last) if found is None else (min(found[0], h.base_offset),
                                                             max(found[1], last))
        start = pos + LOG_OVERHEAD + h.length + _MAGIC_AT
