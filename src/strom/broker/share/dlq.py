"""Dead-letter topics for share groups (KIP-1191, in Kafka 4.4).

A record that a consumer rejects, or whose delivery count reaches the limit, is written to the
group's `errors.deadletterqueue.topic.name` before it is archived: to partition
`source partition % DLQ partitions`, with Kafka's `__dlq.errors.*` headers naming the source
topic, partition, offset, group, delivery count and reason, and with the record's key and value
only when `errors.deadletterqueue.copy.record.enable` is true (Kafka's default copies nothing).
As in Kafka, the topic must exist, start with the broker's
`errors.deadletterqueue.topic.name.prefix` and have `errors.deadletterqueue.group.enable=true`;
otherwise the records are archived without a dead letter (and an ERROR line says so).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from strom.broker.share.partition import DeadLetter
from strom.broker.share.settings import ShareSettings
from strom.cluster.image import MetadataImage
from strom.common.waiters import WaiterRegistry
from strom.record import CorruptRecordError, Record, build_batch, decode_records, iter_batches
from strom.storage.errors import StorageError
from strom.storage.log import PartitionLog
from strom.storage.validator import ORIGIN_COORDINATOR

log = logging.getLogger(__name__)

READ_BYTES = 1 << 20  # as Kafka: dead letters are usually single records
HEADER_TOPIC = "__dlq.errors.topic"
HEADER_PARTITION = "__dlq.errors.partition"
HEADER_OFFSET = "__dlq.errors.offset"
HEADER_GROUP = "__dlq.errors.group"
HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_MESSAGE = "__dlq.errors.message"
GROUP_ENABLE = "errors.deadletterqueue.group.enable"  # the topic config that permits a DLQ


class Logs(Protocol):
    waiters: WaiterRegistry

    def get(self, topic: str, partition: int) -> PartitionLog | None: ...


class DeadLetterWriter:
    def __init__(self, broker_id: int, image: MetadataImage, logs: Logs,
                 now_ms: Callable[[], int]) -> None:
        self.broker_id = broker_id
        self.image = image
        self.logs = logs
        self.now_ms = now_ms

    async def write(self, group_id: str, topic: str, partition: int, dead: DeadLetter,
                    settings: ShareSettings) -> None:
        """Write the dead letters of offsets first..last; a failure is logged at ERROR (the
        records are archived all the same, as Kafka does once its retries are spent)."""
        what = (f"share group {group_id}: records {dead.first_offset}-{dead.last_offset} of "
                f"{topic}-{partition} ({dead.reason})")
        name = settings.dlq_topic
        dlq = self.image.topics.get(name) if name else None
        refused = None
        if not name.startswith(settings.dlq_prefix):
            refused = (f"the dead-letter topic {name!r} does not start with "
                       f"errors.deadletterqueue.topic.name.prefix {settings.dlq_prefix!r}")
        elif dlq is None or not dlq.partitions:
            refused = f"the dead-letter topic {name!r} does not exist"
        elif str(dlq.configs.get(GROUP_ENABLE, "false")).lower() != "true":
            refused = f"the topic {name!r} does not allow it ({GROUP_ENABLE} is not true)"
        if refused is not None or dlq is None:
            log.error("%s archived without a dead letter: %s", what, refused)
            return
        target = partition % len(dlq.partitions)
        state = dlq.partitions.get(target)
        plog = self.logs.get(name, target)
        if state is None or plog is None or state.leader != self.broker_id:
            log.error("%s archived without a dead letter: %s-%d is led by broker %s, not this "
                      "one", what, name, target, None if state is None else state.leader)
            return
        now = self.now_ms()
        copies = self._source_records(topic, partition, dead) if settings.dlq_copy_record else {}
        records = []
        for i, offset in enumerate(range(dead.first_offset, dead.last_offset + 1)):
            source = copies.get(offset)
            headers = [(HEADER_TOPIC, topic.encode()), (HEADER_PARTITION, str(partition).encode()),
                       (HEADER_OFFSET, str(offset).encode()), (HEADER_GROUP, group_id.encode()),
                       (HEADER_DELIVERY_COUNT, str(dead.delivery_count).encode()),
                       (HEADER_MESSAGE, dead.reason.encode())]
            records.append(Record(i, now, None if source is None else source.key,
                                  None if source is None else source.value, headers))
        try:
            plog.append(memoryview(bytearray(build_batch(records))),
                        leader_epoch=state.leader_epoch, now_ms=now, origin=ORIGIN_COORDINATOR)
        except StorageError as exc:
            log.error("%s archived without a dead letter: writing to %s-%d failed: %s", what,
                      name, target, exc)
            return
        self.logs.waiters.notify((name, target))
        log.info("%s written to the dead-letter topic %s-%d", what, name, target)

    def _source_records(self, topic: str, partition: int, dead: DeadLetter) -> dict[int, Record]:
        plog = self.logs.get(topic, partition)
        if plog is None:
            return {}
        out: dict[int, Record] = {}
        offset = dead.first_offset
        while offset <= dead.last_offset:
            try:
                result = plog.read(offset, READ_BYTES)  # whole batches, up to the high watermark
            except StorageError:
                break
            if result.slice is None or result.slice.length == 0:
                break
            data = result.slice.read_bytes()
            moved = False
            try:
                for pos, header in iter_batches(data):
                    if header.is_control:
                        continue
                    for r in decode_records(data[pos:pos + header.size]):
                        if dead.first_offset <= r.offset <= dead.last_offset:
                            out[r.offset] = r
                    if header.next_offset > offset:
                        offset, moved = header.next_offset, True
            except CorruptRecordError as exc:
                log.error("cannot copy records of %s-%d to the dead-letter topic: %s", topic,
                          partition, exc)
                break
            if not moved:
                break
        return out
