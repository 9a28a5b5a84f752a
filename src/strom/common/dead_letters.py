"""What every dead letter Strom writes has in common, wherever it is written: share groups
(KIP-1191), topics that validate their records, and Iceberg topics' lake writer.

One naming rule (the broker's ``errors.deadletterqueue.topic.name.prefix``: an operator decides
which topics may receive dead letters), one choice of partition (the source partition modulo
the dead-letter topic's partitions) and Kafka's ``__dlq.errors.*`` headers. The writers differ
in how they reach the topic (in the broker, or as a client of it) and in what a failure costs,
each documented with it.
"""

from __future__ import annotations

DLQ_TOPIC_CONFIG = "errors.deadletterqueue.topic.name"  # topic (and group) config
PREFIX_CONFIG = "errors.deadletterqueue.topic.name.prefix"  # broker config
GROUP_ENABLE = "errors.deadletterqueue.group.enable"  # the topic config that permits share DLQs

HEADER_TOPIC = "__dlq.errors.topic"
HEADER_PARTITION = "__dlq.errors.partition"
HEADER_OFFSET = "__dlq.errors.offset"
HEADER_GROUP = "__dlq.errors.group"
HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_MESSAGE = "__dlq.errors.message"
HEADER_SCHEMA_ID = "__dlq.errors.schema.id"


def naming_refusal(name: str, prefix: str) -> str | None:
    """Why ``name`` may not receive dead letters under the broker's prefix (None: it may)."""
    if not name.startswith(prefix):
        return (f"the dead-letter topic {name!r} does not start with {PREFIX_CONFIG} "
                f"{prefix!r}")
    return None


def target_partition(source_partition: int, dlq_partitions: int) -> int:
    """The dead-letter partition of a source partition's records (their order is kept)."""
    return source_partition % dlq_partitions


def source_headers(topic: str, partition: int, message: str,
                   offset: int | None = None) -> list[tuple[str, bytes]]:
    """The headers naming where a dead letter came from and why."""
    headers = [(HEADER_TOPIC, topic.encode()), (HEADER_PARTITION, str(partition).encode())]
    if offset is not None:
        headers.append((HEADER_OFFSET, str(offset).encode()))
    headers.append((HEADER_MESSAGE, message.encode()))
    return headers


def schema_id_header(value: bytes | None) -> list[tuple[str, bytes]]:
    """``__dlq.errors.schema.id`` for a value in the schema registry's wire format (magic
    byte 0, then the id), else nothing."""
    if value is not None and len(value) >= 5 and value[0] == 0:
        return [(HEADER_SCHEMA_ID, str(int.from_bytes(value[1:5], "big")).encode())]
    return []
