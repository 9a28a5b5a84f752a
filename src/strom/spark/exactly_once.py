"""The exactly-once mode of the ``strom`` sink: which transactional id a Spark task uses, and
how a task recognises a batch that is already in the topics.

Pure logic (no Spark, no client library); ``sink.py`` runs it in every task. The scheme:

- a task that has rows writes all of them in one Kafka transaction under the transactional id
  ``<prefix>-<Spark partition id>``. The prefix is the ``transactionalIdPrefix`` option or
  ``strom-sink-<query id>``: Spark keeps the query id in the checkpoint, so the ids are the
  same after a driver restart. A retried or speculative attempt of the task gets the same id;
  its ``init_transactions`` fences the earlier attempt and aborts whatever it left open;
- the same transaction commits one offset to the consumer group named like the transactional
  id, whose metadata is a :class:`WriteMark` (query id, batch id, partition id). The mark
  becomes visible exactly when the records do, and not at all if they are aborted;
- after ``init_transactions`` (which waits until the previous attempt's transaction is
  finished) and before writing, the task reads its group's marks. A mark of the same query at
  this batch id or a later one means the batch was already written: the task writes nothing.

Spark replays a batch with the same batch id and the same offsets (and so the same rows in the
same partitions) after a task, job or driver failure, which is what makes the per-partition
mark sufficient.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from strom.spark.options import StromOptionError

# Local properties Spark sets on every task of a micro-batch (also inside foreachBatch).
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
DEFAULT_PREFIX = "strom-sink"
MARK_FORMAT = "strom-sink/1"  # tells our marks apart from any other metadata in the group

FOREACH_BATCH_NEEDS_PREFIX = (
    "exactlyOnce=true in a batch write inside foreachBatch needs the 'transactionalIdPrefix' "
    "option: the write then records the micro-batch id and a replayed micro-batch is skipped. "
    "Give each strom write of the foreachBatch function its own prefix, the same on every run "
    "of the query (e.g. .option('transactionalIdPrefix', 'orders-enriched')).")


@dataclass(frozen=True)
class TxnScope:
    """Where one Spark task's transaction belongs.

    ``write`` names the sequence the batch ids belong to: the streaming query id, or for a batch
    write outside streaming an id drawn once per ``save()``.
    """

    transactional_id: str
    group_id: str
    write: str
    batch: int
    partition: int


def transactional_id(prefix: str, partition: int) -> str:
    """``<prefix>-<partition>``: the partition id is last, so two prefixes never collide on an
    id unless they are equal."""
    return f"{prefix}-{partition}"


def task_scope(*, streaming: bool, prefix_option: str | None, query_id: str | None,
               batch_id: str | None, partition: int, write_id: str) -> TxnScope:
    """The transaction scope of one task.

    ``query_id`` and ``batch_id`` are the task's local properties (None when unset);
    ``write_id`` is the random id of a batch writer (one per ``df.write...save()``).

    - streaming sink: prefix ``transactionalIdPrefix`` or ``strom-sink-<query id>``, batch id
      of the micro-batch;
    - batch write inside foreachBatch (the micro-batch's properties are inherited): the same,
      but the prefix option is required, since one function may write several times per batch;
    - batch write elsewhere: prefix ``transactionalIdPrefix`` or ``strom-sink-<write id>``,
      batch 0 of the write ``write_id``: only retries within this ``save()`` are recognised.
    """
    in_micro_batch = query_id is not None and batch_id is not None
    if streaming and not in_micro_batch:
        raise RuntimeError(
            "the streaming strom sink found no query id or batch id in its task "
            f"(local properties {QUERY_ID_PROPERTY!r}, {BATCH_ID_PROPERTY!r})")
    if in_micro_batch:
        assert query_id is not None and batch_id is not None
        if not streaming and prefix_option is None:
            raise StromOptionError(FOREACH_BATCH_NEEDS_PREFIX)
        prefix = prefix_option or f"{DEFAULT_PREFIX}-{query_id}"
        write, batch = query_id, int(batch_id)
    else:
        prefix = prefix_option or f"{DEFAULT_PREFIX}-{write_id}"
        write, batch = write_id, 0
    txn_id = transactional_id(prefix, partition)
    return TxnScope(transactional_id=txn_id, group_id=txn_id, write=write, batch=batch,
                    partition=partition)


@dataclass(frozen=True)
class WriteMark:
    """What a committed transaction records about itself (offset commit metadata)."""

    write: str
    batch: int
    partition: int
    records: int = 0

    def metadata(self) -> str:
        return json.dumps({"format": MARK_FORMAT, "write": self.write, "batch": self.batch,
                           "partition": self.partition, "records": self.records},
                          separators=(",", ":"), sort_keys=True)

    @classmethod
    def parse(cls, text: str | None) -> WriteMark | None:
        """The mark in ``text``, or None for anything that is not one of ours."""
        try:
            data = json.loads(text or "")
        except ValueError:
            return None
        if not isinstance(data, dict) or data.get("format") != MARK_FORMAT:
            return None
        try:
            return cls(write=str(data["write"]), batch=int(data["batch"]),
                       partition=int(data["partition"]), records=int(data.get("records", 0)))
        except (KeyError, TypeError, ValueError):
            return None


def mark_for(scope: TxnScope, records: int) -> WriteMark:
    return WriteMark(write=scope.write, batch=scope.batch, partition=scope.partition,
                     records=records)


def already_written(metadata: Iterable[str | None], scope: TxnScope) -> WriteMark | None:
    """The mark proving this task's batch is already written, if any.

    That is a mark of the same write and partition at the task's batch id or later (later: the
    checkpoint was rolled back further than the last batch; those batches were written too).
    Marks of another write (an earlier query that used the same prefix, or another ``save()``)
    prove nothing and are ignored.
    """
    best: WriteMark | None = None
    for text in metadata:
        mark = WriteMark.parse(text)
        if (mark is not None and mark.write == scope.write and mark.partition == scope.partition
                and mark.batch >= scope.batch and (best is None or mark.batch > best.batch)):
            best = mark
    return best
