"""Data-lake load (batch): copy a topic's backlog into Parquet, partitioned by date, resumably.

Each run reads the offsets after the last loaded ones up to the end offsets seen when the run
starts, in parallel (one Spark task per partition range, split further with ``min_partitions``),
and writes Parquet partitioned by ``date`` (the record timestamp's UTC day). Run it as often as
the offline system needs: every run loads what arrived since the previous one.

Exactly-once into the lake, also across crashes, by a small commit protocol beside the output::

    <output>/date=2026-11-22/part-....parquet   the data
    <output>/_strom_loads/<load-id>/            a run's files while it is being written
    <output>/_strom_offsets/000000000007.json   one commit record per finished run

1. the run writes its files under ``_strom_loads/<load-id>/``;
2. it writes the commit record (load id, start and end offsets) atomically (write, rename);
3. it moves the files into place, then deletes the staging directory.
A run that dies before step 2 leaves staging files that the next run deletes (their offsets
are loaded again); one that dies after step 2 leaves files the next run moves into place
first. The output is a local (or mounted) filesystem path: the protocol relies on rename.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.spark import FORMAT
from strom.spark.admin import OffsetReader
from strom.spark.offsets import PartitionOffsets, from_json_dict, to_json_dict
from strom.spark.options import parse_source_options

log = logging.getLogger("strom.pipelines")

OFFSETS_DIR = "_strom_offsets"
STAGING_DIR = "_strom_loads"


@dataclass
class LakeLoadConfig:
    bootstrap_servers: str
    topic: str = "clicks"  # one topic, or several separated by commas
    output: str = "out/lake/clicks"
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    kafka: dict[str, str] = field(default_factory=dict)


@dataclass
class LoadResult:
    load_id: str | None
    start: PartitionOffsets
    end: PartitionOffsets
    records: int
    files: int
    seconds: float

    @property
    def offsets(self) -> int:
        return sum(self.end[tp] - self.start.get(tp, 0) for tp in self.end)


# --------------------------------------------------------------------------------------------
# commit records
# --------------------------------------------------------------------------------------------


def _commits(output: Path) -> list[Path]:
    d = output / OFFSETS_DIR
    return sorted(d.glob("*.json")) if d.is_dir() else []


def last_commit(output: Path | str) -> dict[str, Any] | None:
    """The newest commit record (``load_id``, ``start``, ``end``, ``records``), if any."""
    commits = _commits(Path(output))
    return json.loads(commits[-1].read_text()) if commits else None


def loaded_offsets(output: Path | str) -> PartitionOffsets:
    """Offsets after the last loaded record of each partition (empty before the first load)."""
    commit = last_commit(output)
    return from_json_dict(commit["end"]) if commit else {}


def _write_commit(output: Path, record: dict[str, Any]) -> Path:
    d = output / OFFSETS_DIR
    d.mkdir(parents=True, exist_ok=True)
    commits = _commits(output)
    seq = int(commits[-1].stem) + 1 if commits else 0
    final = d / f"{seq:012d}.json"
    tmp = d / f".{final.name}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, final)  # atomic: a commit record is either complete or absent
    return final


def _publish(staging: Path, output: Path) -> int:
    """Move a committed run's files into place (idempotent: safe to repeat after a crash)."""
    moved = 0
    for src in sorted(staging.rglob("*.parquet")):
        rel = src.relative_to(staging)
        dst = output / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
        moved += 1
    shutil.rmtree(staging, ignore_errors=True)
    return moved


def recover(output: Path | str) -> None:
    """Finish or discard what an interrupted run left in the staging area."""
    output = Path(output)
    staging_root = output / STAGING_DIR
    if not staging_root.is_dir():
        return
    committed = {json.loads(p.read_text()).get("load_id") for p in _commits(output)}
    for staging in sorted(staging_root.iterdir()):
        if staging.name in committed:
            n = _publish(staging, output)
            log.info("load %s was committed but not published: moved %d files", staging.name, n)
        else:
            shutil.rmtree(staging, ignore_errors=True)
            log.info("discarded the files of unfinished load %s", staging.name)


# --------------------------------------------------------------------------------------------
# a run
# --------------------------------------------------------------------------------------------


def source_options(bootstrap_servers: str, topic: str, kafka: dict[str, str]) -> dict[str, str]:
    """The `strom` source's options for reading `topic` (client settings as ``kafka.*``)."""
    opts = {"kafka.bootstrap.servers": bootstrap_servers, "subscribe": topic}
    opts.update({f"kafka.{k}": v for k, v in kafka.items()})
    return opts


def plan_offsets(options: dict[str, str], done: PartitionOffsets
                 ) -> tuple[PartitionOffsets, PartitionOffsets]:
    """(start, end) of a load: after what `done` says was loaded (or from the earliest offset)
    up to the end now. A partition that now ends before its loaded offset was truncated or
    recreated: it starts again from its earliest offset."""
    reader = OffsetReader(parse_source_options(options, streaming=False))
    try:
        tps = reader.partitions(fresh=True)
        end = reader.latest(tps)
        start = {tp: off for tp, off in done.items() if tp in end}
        start.update(reader.earliest([tp for tp in tps if tp not in done]))
    finally:
        reader.close()
    for tp, off in list(start.items()):
        if off > end[tp]:
            log.warning("%s-%d: loaded up to %d but the partition now ends at %d; restarting "
                        "from its earliest offset", tp[0], tp[1], off, end[tp])
            start[tp] = -2
    return start, end


def batch_reader(spark: Any, cfg: Any, start: PartitionOffsets, end: PartitionOffsets) -> Any:
    """A batch read of the `strom` source from `start` to `end` with a load's settings
    (`cfg`: bootstrap_servers, fail_on_data_loss, include_headers, min_partitions, kafka)."""
    assign: dict[str, list[int]] = {}
    for topic, partition in sorted(end):
        assign.setdefault(topic, []).append(partition)
    reader = (spark.read.format(FORMAT)
              .option("kafka.bootstrap.servers", cfg.bootstrap_servers)
              .option("assign", json.dumps(assign))
              .option("startingOffsets", json.dumps(to_json_dict(start)))
              .option("endingOffsets", json.dumps(to_json_dict(end)))
              .option("failOnDataLoss", str(cfg.fail_on_data_loss).lower())
              .option("includeHeaders", str(cfg.include_headers).lower()))
    if cfg.min_partitions:
        reader = reader.option("minPartitions", str(cfg.min_partitions))
    for key, value in cfg.kafka.items():
        reader = reader.option(f"kafka.{key}", value)
    return reader


def plan(cfg: LakeLoadConfig) -> tuple[PartitionOffsets, PartitionOffsets]:
    """(start, end) of the next run: after the last load (or earliest) up to the end now."""
    return plan_offsets(source_options(cfg.bootstrap_servers, cfg.topic, cfg.kafka),
                        loaded_offsets(cfg.output))


def run(spark: Any, cfg: LakeLoadConfig) -> LoadResult:
    """Load everything between the last committed offsets and the current end offsets."""
    from pyspark.sql import functions as F

    began = time.monotonic()
    output = Path(cfg.output)
    output.mkdir(parents=True, exist_ok=True)
    recover(output)
    start, end = plan(cfg)
    todo = {tp: off for tp, off in end.items() if off > start.get(tp, off) or start.get(tp) == -2}
    if not todo:
        return LoadResult(None, start, end, 0, 0, time.monotonic() - began)

    load_id = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}"
    staging = output / STAGING_DIR / load_id
    df = batch_reader(spark, cfg, start, end).load().withColumn("date", F.to_date("timestamp"))
    df.write.partitionBy("date").mode("error").parquet(str(staging))
    records = sum(
        pq_rows(p) for p in staging.rglob("*.parquet"))
    _write_commit(output, {
        "load_id": load_id,
        "start": to_json_dict({tp: off for tp, off in start.items()}),
        "end": to_json_dict(end),
        "records": records,
        "committed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    })
    files = _publish(staging, output)
    return LoadResult(load_id, start, end, records, files, time.monotonic() - began)


def pq_rows(path: Path) -> int:
    """Row count of one Parquet file (from its footer)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows
