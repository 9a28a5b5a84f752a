"""Dead letters of an Iceberg topic: values its table cannot take (they do not decode with the
topic's value schema) go to the topic's `errors.deadletterqueue.topic.name`, so that one bad
record does not hold the table back.

The lake writer is a client of its broker, so it writes them as a producer does (acks=all,
idempotent), with the naming rule, partition choice and headers every Strom dead letter has
(`strom.common.dead_letters`; plus `__dlq.errors.offset`). A record is taken out of the table's
batch only once its dead letter is acknowledged; one that cannot be written stays in the batch's
way, with an ERROR line, and is tried again after the next commit: never dropped. Dead letters
are written at least once: a writer killed after writing them and before its table commit
writes them again on restart (the offset header tells the copies apart).
"""

from __future__ import annotations

import logging
from typing import Any

from strom.common.dead_letters import (
    naming_refusal,
    schema_id_header,
    source_headers,
    target_partition,
)
from strom.lake.mapping import Row

log = logging.getLogger("strom.lake")

DELIVERY_TIMEOUT_MS = 30_000


class DeadLetterSender:
    def __init__(self, client_base: dict[str, Any], prefix: str, admin: Any) -> None:
        self.client_base = client_base
        self.prefix = prefix
        self.admin = admin
        self._producer: Any = None

    def _partitions(self, name: str) -> int:
        topic = self.admin.list_topics(topic=name, timeout=10).topics.get(name)
        if topic is None or topic.error is not None or not topic.partitions:
            return 0
        return len(topic.partitions)

    def send(self, topic: str, dlq: str, bad: list[tuple[Row, str]]) -> dict[int, int]:
        """Writes a dead letter for each (row, reason); returns, per partition, the offset of
        the first row whose dead letter was not acknowledged (they stay in the topic's way)."""
        if not bad:
            return {}
        why = naming_refusal(dlq, self.prefix)
        count = 0
        if why is None:
            try:
                count = self._partitions(dlq)
            except Exception as exc:
                why = f"its metadata cannot be read: {exc}"
            else:
                if count == 0:
                    why = f"the dead-letter topic {dlq!r} does not exist"
        if why is not None:
            log.error("topic %s: %d records whose values do not decode cannot go to the "
                      "dead-letter topic: %s (they wait: not written, not skipped)", topic,
                      len(bad), why)
            return _firsts(row for row, _ in bad)
        if self._producer is None:
            from confluent_kafka import Producer

            self._producer = Producer({**self.client_base, "acks": "all",
                                       "enable.idempotence": True, "linger.ms": 5,
                                       "message.timeout.ms": DELIVERY_TIMEOUT_MS})
        failed: list[Row] = []
        errors: list[str] = []
        for row, reason in bad:
            def report(err: Any, _msg: Any, row: Row = row) -> None:
                if err is not None:
                    failed.append(row)
                    errors.append(str(err))

            headers = [*row.headers, *source_headers(topic, row.partition, reason, row.offset),
                       *schema_id_header(row.value)]
            self._producer.produce(dlq, value=row.value, key=row.key, headers=headers,
                                   partition=target_partition(row.partition, count),
                                   timestamp=row.timestamp_ms, on_delivery=report)
        left = self._producer.flush(DELIVERY_TIMEOUT_MS / 1000 + 5)
        if left:  # not even timed out: count every row of this call as not written
            failed = [row for row, _ in bad]
            errors.append(f"{left} dead letters still unanswered")
        if failed:
            log.error("topic %s: %d dead letters to %s were not acknowledged (%s): those "
                      "records wait and are tried again", topic, len(failed), dlq, errors[0])
        else:
            log.warning("topic %s: %d records whose values do not decode went to the "
                        "dead-letter topic %s", topic, len(bad), dlq)
        return _firsts(failed)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)


def _firsts(rows: Any) -> dict[int, int]:
    firsts: dict[int, int] = {}
    for row in rows:
        if row.partition not in firsts or row.offset < firsts[row.partition]:
            firsts[row.partition] = row.offset
    return firsts
