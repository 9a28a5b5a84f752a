"""`strom dump-log PATH...`: print the contents of log segment files (kafka-dump-log.sh).

Reads the files directly, without a broker: `.log` segments batch by batch (header fields,
CRC check, optionally every record), `.index` (offset -> position), `.timeindex`
(timestamp -> offset) and `.txnindex` (aborted transactions). Damage is reported, not fatal:
a torn tail, a bad CRC or a corrupt batch becomes a `problem:` line and exit code 1.

Index files are read whole (they are small) rather than mapped, so a running broker that
trims or rewrites one meanwhile cannot crash the dump (SIGBUS), and Kafka's preallocated
indexes (zero-filled past their last entry while the segment is active, or after an unclean
stop) end at their first zero entry. The records of `__consumer_offsets`,
`__transaction_state` and `__share_group_state` are decoded by `dump_decoders`.
"""

from __future__ import annotations

import dataclasses
import json
import mmap
import struct
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from strom import record as rec
from strom.cli.common import UsageError, handle_errors

SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
_TXN_ENTRY = struct.Struct(">hqqqq")  # version, producer id, first, last, last stable offset


@dataclass
class DumpOptions:
    deep: bool = False  # decode records
    print_data: bool = False  # include keys and values
    max_bytes: int | None = None  # stop reading a .log after this many bytes
    json: bool = False
    decoder: str | None = None  # an internal topic's record decoder (see dump_decoders)


@dataclass
class DumpResult:
    """What one file's dump found: `problems` decide the exit code."""

    path: Path
    batches: int = 0
    records: int = 0
    entries: int = 0
    problems: list[str] = field(default_factory=list)


def base_offset_of(path: Path) -> int:
    """Segment files are named after their base offset (20 digits)."""
    try:
        return int(path.name.split(".", 1)[0])
    except ValueError:
        raise UsageError(f"{path.name}: not a segment file name (expected <base offset>{path.suffix})") from None


@contextmanager
def _mapped(path: Path) -> Iterator[memoryview]:
    """The file's bytes, memory-mapped so a 1 GiB segment is not read into memory."""
    with path.open("rb") as f:
        size = path.stat().st_size
        if size == 0:
            yield memoryview(b"")
            return
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        mv = memoryview(m)
        try:
            yield mv
        finally:
            mv.release()
            m.close()


def _text(data: bytes | None) -> str:
    """Record data for a one-line-per-record listing: UTF-8, other bytes and newlines escaped."""
    if data is None:
        return "null"
    s = bytes(data).decode("utf-8", errors="backslashreplace")
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r") if ("\n" in s or "\r" in s) else s


def _ts_name(timestamp_type: int) -> str:
    return "LogAppendTime" if timestamp_type else "CreateTime"


def batch_info(buf: memoryview, pos: int, h: rec.BatchHeader, opts: DumpOptions) -> dict[str, Any]:
    """Everything `dump-log` shows about one batch (and its records when `opts.deep`)."""
    last_seq = -1
    if h.base_sequence >= 0:
        last_seq = (h.base_sequence + h.last_offset_delta) % 2**31
    info: dict[str, Any] = {
        "baseOffset": h.base_offset,
        "lastOffset": h.last_offset,
        "count": h.records_count,
        "baseSequence": h.base_sequence,
        "lastSequence": last_seq,
        "producerId": h.producer_id,
        "producerEpoch": h.producer_epoch,
        "partitionLeaderEpoch": h.partition_leader_epoch,
        "isTransactional": h.is_transactional,
        "isControl": h.is_control,
        "position": pos,
        "timestampType": _ts_name(h.timestamp_type),
        "maxTimestamp": h.max_timestamp,
        "size": h.size,
        "magic": h.magic,
        "compresscodec": rec.COMPRESSION_NAMES.get(h.compression, f"unknown({h.compression})"),
        "crc": h.crc,
        "isvalid": rec.crc_ok(buf, pos, h),
    }
    if h.attributes & rec.DELETE_HORIZON_MASK:
        info["deleteHorizonMs"] = h.base_timestamp
    if opts.deep:
        info["records"] = _records(buf[pos : pos + h.size], h, opts)
    return info


def _records(batch: memoryview, h: rec.BatchHeader, opts: DumpOptions) -> list[dict[str, Any]] | str:
    try:
        records = rec.decode_records(batch)
    except rec.CorruptRecordError as e:
        return f"cannot decode records: {e}"
    out = []
    for i, r in enumerate(records):
        item: dict[str, Any] = {
            "offset": r.offset,
            "timestampType": _ts_name(h.timestamp_type),
            "timestamp": r.timestamp,
            "keySize": -1 if r.key is None else len(r.key),
            "valueSize": -1 if r.value is None else len(r.value),
            "sequence": (h.base_sequence + (r.offset - h.base_offset)) % 2**31 if h.base_sequence >= 0 else -1,
            "headerKeys": [k for k, _ in r.headers],
        }
        if h.is_control and i == 0 and r.key is not None:
            try:
                kind, epoch = rec.parse_control_record(r.key, r.value)
                item["endTxnMarker"] = {rec.CONTROL_COMMIT: "COMMIT", rec.CONTROL_ABORT: "ABORT"}.get(
                    kind, f"UNKNOWN({kind})")
                item["coordinatorEpoch"] = epoch
            except (rec.CorruptRecordError, struct.error):
                item["endTxnMarker"] = "CORRUPT"
        elif opts.decoder is not None:
            from strom.cli.dump_decoders import decode_record  # lazy: the codecs load slowly

            item.update(decode_record(opts.decoder, r.key, r.value, r.offset))
        elif opts.print_data:
            item["key"] = _text(r.key)
            item["payload"] = _text(r.value)
            item["headers"] = {k: _text(v) for k, v in r.headers}
        out.append(item)
    return out


def _fmt_bool(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def render_batch(info: dict[str, Any]) -> list[str]:
    """Text lines for one batch: Kafka's `key: value` style, records prefixed with `| `."""
    fields = [k for k in info if k not in ("records", "timestampType", "maxTimestamp")]
    parts = []
    for k in fields:
        if k == "position":
            parts.append(f"position: {info['position']} {info['timestampType']}: {info['maxTimestamp']}")
        else:
            parts.append(f"{k}: {_fmt_bool(info[k])}")
    lines = [" ".join(parts)]
    records = info.get("records")
    if isinstance(records, str):
        lines.append(f"| {records}")
    elif records is not None:
        for r in records:
            rparts = [f"offset: {r['offset']}", f"{r['timestampType']}: {r['timestamp']}",
                      f"keySize: {r['keySize']}", f"valueSize: {r['valueSize']}",
                      f"sequence: {r['sequence']}", f"headerKeys: [{','.join(r['headerKeys'])}]"]
            if "endTxnMarker" in r:
                rparts.append(f"endTxnMarker: {r['endTxnMarker']} coordinatorEpoch: {r['coordinatorEpoch']}")
            if r.get("headers"):
                rparts.append("headers: " + ",".join(f"{k}:{v}" for k, v in r["headers"].items()))
            if "key" in r:
                rparts.append(f"key: {_shown(r['key'])}")
            if "payload" in r:
                rparts.append(f"payload: {_shown(r['payload'])}")
            lines.append("| " + " ".join(rparts))
    return lines


def _shown(data: Any) -> str:
    """A key or payload in a text line: decoded records as compact JSON, as Kafka prints them."""
    return json.dumps(data, separators=(",", ":")) if isinstance(data, dict) else str(data)


def _is_zero(buf: memoryview) -> bool:
    """All zero bytes (preallocated space), checked a megabyte at a time."""
    step = 1 << 20
    for i in range(0, len(buf), step):
        chunk = buf[i : i + step]
        if chunk != bytes(len(chunk)):
            return False
    return True


def scan_log(buf: memoryview, opts: DumpOptions, emit: Callable[[dict[str, Any]], None],
             result: DumpResult) -> None:
    """Walk a segment's batches; report a torn or corrupt tail instead of stopping with an error."""
    end = len(buf) if opts.max_bytes is None else min(len(buf), opts.max_bytes)
    pos = 0
    while pos < end:
        remaining = len(buf) - pos
        if _is_zero(buf[pos : pos + rec.RECORD_BATCH_OVERHEAD]) and _is_zero(buf[pos:]):
            emit({"note": f"{remaining} zero bytes from position {pos} to the end "
                         "(preallocated space or a tail never written)"})
            return
        if remaining < rec.RECORD_BATCH_OVERHEAD:
            result.problems.append(
                f"torn tail: {remaining} bytes at position {pos} are not a complete batch")
            return
        base_offset, length = struct.unpack_from(">qi", buf, pos)
        magic = struct.unpack_from(">b", buf, pos + rec.MAGIC_OFFSET)[0]
        if length < rec.MIN_BATCH_LENGTH and magic == rec.MAGIC_V2:
            result.problems.append(f"corrupt batch at position {pos}: length {length} is too small")
            return
        if length <= 0:
            result.problems.append(f"corrupt batch at position {pos}: length {length}")
            return
        size = rec.LOG_OVERHEAD + length
        if pos + size > len(buf):
            result.problems.append(
                f"torn tail: batch at position {pos} (baseOffset {base_offset}) needs {size} bytes, "
                f"only {remaining} remain")
            return
        if magic != rec.MAGIC_V2:
            result.problems.append(f"batch at position {pos} (offset {base_offset}) has magic {magic}; "
                                   "only magic 2 is supported")
            pos += size
            continue
        h = rec.read_header(buf, pos)
        info = batch_info(buf, pos, h, opts)
        result.batches += 1
        if not info["isvalid"]:
            result.problems.append(f"batch at position {pos} (baseOffset {h.base_offset}) fails its CRC check")
        records = info.get("records")
        if isinstance(records, str):
            result.problems.append(f"batch at position {pos} (baseOffset {h.base_offset}): {records}")
        elif records is not None:
            result.records += len(records)
        emit(info)
        pos += size


def _preallocated_from(buf: memoryview, i: int, size: int, entry: tuple[int, ...]) -> bool:
    """True when entry `i` (all zeros) starts the zero-filled space Kafka preallocates: always
    after the first entry; for the first only when the whole file is zeros (no batch at
    position 0 is ever indexed, but a lone zero entry is printed rather than hidden)."""
    return not any(entry) and (i > 0 or _is_zero(buf[i * size :]))


def scan_offset_index(buf: memoryview, base: int, emit: Callable[[dict[str, Any]], None],
                      result: DumpResult, log: memoryview | None = None) -> None:
    """Entries of an offset index; checked against the segment when it is at hand."""
    n = len(buf) // _OFFSET_ENTRY.size
    if len(buf) % _OFFSET_ENTRY.size:
        result.problems.append(f"index size {len(buf)} is not a multiple of {_OFFSET_ENTRY.size}")
    prev = -1
    for i in range(n):
        rel, position = _OFFSET_ENTRY.unpack_from(buf, i * _OFFSET_ENTRY.size)
        if _preallocated_from(buf, i, _OFFSET_ENTRY.size, (rel, position)):
            break  # preallocated (sparse) space: no more entries
        offset = base + rel
        result.entries += 1
        emit({"offset": offset, "position": position})
        if offset <= prev:
            result.problems.append(f"index entry {i}: offset {offset} is not above the previous {prev}")
        prev = offset
        if log is not None:
            problem = _check_index_entry(log, offset, position)
            if problem:
                result.problems.append(f"index entry {i} (offset {offset} -> position {position}): {problem}")


def _check_index_entry(log: memoryview, offset: int, position: int) -> str | None:
    if position < 0 or position + rec.RECORD_BATCH_OVERHEAD > len(log):
        return "position is outside the segment"
    h = rec.read_header(log, position)
    if h.magic != rec.MAGIC_V2 or h.length < rec.MIN_BATCH_LENGTH:
        return "no batch starts at this position"
    if not h.base_offset <= offset <= h.last_offset:
        return f"the batch there holds offsets {h.base_offset}..{h.last_offset}"
    return None


def scan_time_index(buf: memoryview, base: int, emit: Callable[[dict[str, Any]], None],
                    result: DumpResult) -> None:
    n = len(buf) // _TIME_ENTRY.size
    if len(buf) % _TIME_ENTRY.size:
        result.problems.append(f"time index size {len(buf)} is not a multiple of {_TIME_ENTRY.size}")
    prev_ts, prev_off = -1, -1
    for i in range(n):
        ts, rel = _TIME_ENTRY.unpack_from(buf, i * _TIME_ENTRY.size)
        if _preallocated_from(buf, i, _TIME_ENTRY.size, (ts, rel)):
            break
        offset = base + rel
        result.entries += 1
        emit({"timestamp": ts, "offset": offset})
        if ts < prev_ts or offset < prev_off:
            result.problems.append(f"time index entry {i} (timestamp {ts}, offset {offset}) goes backwards")
        prev_ts, prev_off = ts, offset


def scan_txn_index(buf: memoryview, emit: Callable[[dict[str, Any]], None], result: DumpResult) -> None:
    n = len(buf) // _TXN_ENTRY.size
    if len(buf) % _TXN_ENTRY.size:
        result.problems.append(f"transaction index size {len(buf)} is not a multiple of {_TXN_ENTRY.size}")
    for i in range(n):
        version, pid, first, last, lso = _TXN_ENTRY.unpack_from(buf, i * _TXN_ENTRY.size)
        result.entries += 1
        emit({"version": version, "producerId": pid, "firstOffset": first, "lastOffset": last,
              "lastStableOffset": lso})


def dump_file(path: Path, opts: DumpOptions, write: Callable[[str], None]) -> DumpResult:
    """Dump one file through `write` (one call per output line)."""
    result = DumpResult(path)
    suffix = path.suffix

    def emit(item: dict[str, Any]) -> None:
        if opts.json:
            write(json.dumps({"file": str(path), **item}, separators=(",", ":")))
        elif "note" in item:
            write(item["note"])
        elif suffix == ".log":
            for line in render_batch(item):
                write(line)
        else:
            write(" ".join(f"{k}: {v}" for k, v in item.items()))

    if suffix not in SEGMENT_SUFFIXES:
        result.problems.append(f"{path}: unsupported file type {suffix or '(none)'}, "
                               f"expected one of {', '.join(SEGMENT_SUFFIXES)}")
    else:
        base = base_offset_of(path)
        if not opts.json:
            write(f"Dumping {path}")
        _dump_segment_file(path, suffix, base, _file_options(path, opts), emit, result)
    for problem in result.problems:
        if opts.json:
            write(json.dumps({"file": str(path), "problem": problem}, separators=(",", ":")))
        else:
            write(f"problem: {problem}")
    return result


def _file_options(path: Path, opts: DumpOptions) -> DumpOptions:
    """With --print-data, the records of an internal topic's partition directory are decoded
    (the decoder options choose one for files elsewhere)."""
    if not opts.print_data or opts.decoder is not None:
        return opts
    from strom.cli.dump_decoders import decoder_for_dir

    decoder = decoder_for_dir(path.parent.name)
    return opts if decoder is None else dataclasses.replace(opts, decoder=decoder)


@contextmanager
def _whole(path: Path) -> Iterator[memoryview]:
    """A small file's bytes as they are now: an index a broker trims or rewrites while it is
    read stays readable (a mapping of it would fault past the new end)."""
    yield memoryview(path.read_bytes())


def _dump_segment_file(path: Path, suffix: str, base: int, opts: DumpOptions,
                       emit: Callable[[dict[str, Any]], None], result: DumpResult) -> None:
    with (_mapped if suffix == ".log" else _whole)(path) as buf:
        if suffix == ".log":
            if not opts.json:
                emit({"note": f"Log starting offset: {base}"})
            scan_log(buf, opts, emit, result)
        elif suffix == ".index":
            log_path = path.with_suffix(".log")
            if log_path.is_file():
                with _mapped(log_path) as log:
                    scan_offset_index(buf, base, emit, result, log)
            else:
                scan_offset_index(buf, base, emit, result)
        elif suffix == ".timeindex":
            scan_time_index(buf, base, emit, result)
        else:
            scan_txn_index(buf, emit, result)


def expand_paths(paths: list[Path]) -> list[Path]:
    """Files as given; directories become the segment files below them, sorted."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in SEGMENT_SUFFIXES)
            if not found:
                raise UsageError(f"no segment files under {p}")
            files.extend(found)
        elif p.exists():
            files.append(p)
        else:
            raise UsageError(f"no such file or directory: {p}")
    return files


@handle_errors
def dump_log(
    paths: Annotated[list[Path], typer.Argument(help="Segment files (.log, .index, .timeindex, .txnindex) or directories.")],
    print_records: Annotated[
        bool, typer.Option("--print-records", "--deep-iteration", help="Decode and list every record.")
    ] = False,
    print_data: Annotated[
        bool, typer.Option("--print-data", help="Also print keys, values and headers (implies --print-records).")
    ] = False,
    max_bytes: Annotated[
        int | None, typer.Option("--max-bytes", min=1, help="Read at most this many bytes of each .log file.")
    ] = None,
    output_format: Annotated[
        str, typer.Option("--format", help="text (Kafka's dump style) or json (one object per line).")
    ] = "text",
    offsets_decoder: Annotated[
        bool, typer.Option("--offsets-decoder", help="Decode records as __consumer_offsets "
                           "records (implies --print-data).")
    ] = False,
    transaction_log_decoder: Annotated[
        bool, typer.Option("--transaction-log-decoder", help="Decode records as "
                           "__transaction_state records (implies --print-data).")
    ] = False,
    share_group_state_decoder: Annotated[
        bool, typer.Option("--share-group-state-decoder", help="Decode records as "
                           "__share_group_state records (implies --print-data).")
    ] = False,
) -> None:
    """Print the batches, records and index entries of log segment files (no broker needed)."""
    if output_format not in ("text", "json"):
        raise UsageError(f"invalid --format {output_format!r}: choose text or json")
    decoders = [name for name, chosen in (("offsets", offsets_decoder),
                                          ("transaction-log", transaction_log_decoder),
                                          ("share-group-state", share_group_state_decoder))
                if chosen]
    if len(decoders) > 1:
        raise UsageError("choose one of --offsets-decoder, --transaction-log-decoder and "
                         "--share-group-state-decoder")
    decoder = decoders[0] if decoders else None
    print_data = print_data or decoder is not None
    opts = DumpOptions(deep=print_records or print_data, print_data=print_data, max_bytes=max_bytes,
                       json=output_format == "json", decoder=decoder)
    files = expand_paths(paths)
    stdout = sys.stdout

    def write(line: str) -> None:
        stdout.write(line)
        stdout.write("\n")

    problems = 0
    for path in files:
        problems += len(dump_file(path, opts, write).problems)
    stdout.flush()
    if problems:
        raise typer.Exit(1)
