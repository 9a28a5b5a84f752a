"""Offsets and offset ranges: the pure planning half of the source (no Spark, no client).

A streaming offset is ``{"topic": {"0": next_offset, ...}, ...}`` -- the offset *after* the last
record to read, as Kafka's consumer position and Spark's KafkaSourceOffset define it. Spark
stores the JSON text of these dicts in its offset log and compares them as text, so they are
always built with topics sorted by name and partitions by number: equal offsets give equal text.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from strom.spark.options import TopicPartition

PartitionOffsets = dict[TopicPartition, int]


def to_json_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{(t, p): n}`` -> ``{"t": {"p": n}}`` in the canonical (sorted) order."""
    result: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        result.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return result


def from_json_dict(data: Mapping[str, Mapping[str, int]] | None) -> PartitionOffsets:
    """The inverse of :func:`to_json_dict` (also accepts what Spark read back from a checkpoint)."""
    result: PartitionOffsets = {}
    for topic, parts in (data or {}).items():
        for partition, offset in parts.items():
            result[(topic, int(partition))] = int(offset)
    return result


def tp_text(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Records ``[start, end)`` of one topic-partition: the unit one Spark task reads.

    ``end - start`` is an upper bound on the record count: compaction and transaction markers
    leave gaps, so a reader stops at its position, never after a count of records.
    """

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


# --------------------------------------------------------------------------------------------
# admission control
# --------------------------------------------------------------------------------------------


def rate_limit(limit: int, start: Mapping[TopicPartition, int],
               latest: Mapping[TopicPartition, int],
               earliest_of_new: Callable[[Iterable[TopicPartition]], Mapping[TopicPartition, int]],
               ) -> PartitionOffsets:
    """Cap a micro-batch at ``limit`` offsets, shared out in proportion to each partition's
    backlog (Spark's KafkaMicroBatchStream.rateLimit).

    A partition's share is floored, except that a share below one offset is rounded *up*, so a
    small partition is never starved by large ones. Partitions not in ``start`` (new ones) start
    from their earliest offset, which ``earliest_of_new`` looks up only when needed.
    """
    new = [tp for tp in latest if tp not in start]
    begins: dict[TopicPartition, int] = {tp: off for tp, off in start.items() if tp in latest}
    if new:
        begins.update({tp: off for tp, off in earliest_of_new(new).items() if tp in latest})
    sizes = {tp: latest[tp] - b for tp, b in begins.items() if latest[tp] - b > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    result: PartitionOffsets = {}
    for tp, end in latest.items():
        size = sizes.get(tp)
        if size is None:
            result[tp] = end
            continue
        share = limit * (size / total)
        share_int = math.ceil(share) if share < 1 else math.floor(share)
        result[tp] = min(end, begins[tp] + share_int)
    return result


def backlog(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> int:
    """Offsets available beyond ``start`` (partitions new to ``latest`` count from 0)."""
    return sum(max(0, off - start.get(tp, 0)) for tp, off in latest.items())


# --------------------------------------------------------------------------------------------
# planning a micro-batch
# --------------------------------------------------------------------------------------------


def plan_stream_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                       earliest_of_new: Callable[[Iterable[TopicPartition]], Mapping[TopicPartition, int]],
                       report_data_loss: Callable[[str], None]) -> list[OffsetRange]:
    """The ranges of one micro-batch, reporting data loss as Spark's Kafka source does.

    - a partition new in ``end`` is read from its earliest offset; if it cannot be found, or it
      is not 0, records may have been missed;
    - a partition in ``start`` but no longer in ``end`` is gone;
    - an end offset below the start offset means the partition was truncated or recreated.
    ``report_data_loss`` raises (failOnDataLoss=true) or logs a warning and lets planning go on.
    """
    new = [tp for tp in end if tp not in start]
    new_start = dict(earliest_of_new(new)) if new else {}
    missing = [tp for tp in new if tp not in new_start]
    if missing:
        report_data_loss(f"Cannot find earliest offsets of {_tps(missing)}. Some data may have "
                         "been missed")
    for tp, off in sorted(new_start.items()):
        if off != 0:
            report_data_loss(f"Added partition {tp_text(tp)} starts from {off} instead of 0. "
                             "Some data may have been missed")
    gone = [tp for tp in start if tp not in end]
    if gone:
        report_data_loss(f"{_tps(gone)} are gone. Some data may have been missed.")
    ranges = []
    for tp in sorted(end):
        if tp in start:
            begin = start[tp]
        elif tp in new_start:
            begin = new_start[tp]
        else:
            continue
        until = end[tp]
        if until < begin:
            report_data_loss(f"Partition {tp_text(tp)}'s offset was changed from {begin} to "
                             f"{until}, some data may have been missed")
        ranges.append(OffsetRange(tp[0], tp[1], begin, until))
    return ranges


def _tps(tps: Iterable[TopicPartition]) -> str:
    return "[" + ", ".join(tp_text(tp) for tp in sorted(tps)) + "]"


def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None = None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """Drop empty ranges, cut ranges longer than ``max_records_per_partition``, then, if fewer
    than ``min_partitions`` ranges remain, split the large ones so that roughly
    ``min_partitions`` tasks share the work in proportion to size (Spark's
    KafkaOffsetRangeCalculator). Without either option it is one range per topic-partition.
    """
    result = [r for r in ranges if r.size > 0]
    if max_records_per_partition:
        cut = []
        for r in result:
            parts = max(1, math.ceil(r.size / max_records_per_partition))
            cut.extend(_divide(r, parts))
        result = cut
    if not min_partitions or len(result) >= min_partitions:
        return result
    total = sum(r.size for r in result)

    def part_count(size: int, of_total: int, parts: int) -> int:
        return max(round(size / of_total * parts), 1)

    # Ranges that would not be split anyway are kept out of the proportional arithmetic.
    unsplit = [r for r in result if part_count(r.size, total, min_partitions) == 1]
    unsplit_size = sum(r.size for r in unsplit)
    split_total = total - unsplit_size
    split_min = max(min_partitions - len(unsplit), 1)
    out = []
    for r in result:
        if r in unsplit or split_total <= 0:
            out.append(r)
        else:
            out.extend(_divide(r, part_count(r.size, split_total, split_min)))
    return [r for r in out if r.size > 0]


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``parts`` contiguous pieces of ``r``; the remainder goes to the later pieces."""
    out = []
    remaining = r.size
    begin = r.start
    for i in range(parts):
        this = remaining // (parts - i)
        remaining -= this
        end = min(begin + this, r.end)
        out.append(OffsetRange(r.topic, r.partition, begin, end))
        begin = end
    return out
