"""Following Kafka Streams applications from outside: their printed state and their output.

The test applications (compat/java/frameworks) print ``STATE old -> new`` and
``ACTIVE-TASKS [0_0, 1_2]`` lines; their output topics carry every count update as a string key
and an 8-byte big-endian long, which ``OutputReader`` collects with a read_committed consumer.
"""

from __future__ import annotations

import re
import struct
import uuid
from collections import defaultdict

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from .jvm import JavaProcess

_TASKS = re.compile(r"^ACTIVE-TASKS \[(.*)\]$", re.M)
_STATE = re.compile(r"^STATE \S+ -> (\S+)$", re.M)
_RESTORED = re.compile(r"Finished restoring changelog \S+ to store \S+ with a total number of (\d+) records")


def active_tasks(app: JavaProcess) -> set[str] | None:
    """The tasks an instance last reported when it reached RUNNING (None before that)."""
    found = _TASKS.findall(app.log())
    if not found:
        return None
    return {t.strip() for t in found[-1].split(",") if t.strip()}


def restored_records(app: JavaProcess) -> int:
    """How many changelog records an instance restored into its stores (Streams logs each)."""
    return sum(int(n) for n in _RESTORED.findall(app.log()))


def state(app: JavaProcess) -> str | None:
    found = _STATE.findall(app.log())
    return found[-1] if found else None


class OutputReader:
    """Every committed update of an output topic, per key in offset order."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "isolation.level": "read_committed",
            "fetch.wait.max.ms": 100,
        })  # fmt: skip
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)
                              for p in range(partitions)])
        self.updates: dict[str, list[int]] = defaultdict(list)

    def poll(self, seconds: float = 0.5) -> None:
        for msg in self.consumer.consume(10_000, timeout=seconds):
            if msg.error():
                raise AssertionError(f"reading the output failed: {msg.error()}")
            (count,) = struct.unpack(">q", msg.value())
            self.updates[msg.key().decode()].append(count)

    def latest(self) -> dict[str, int]:
        return {key: values[-1] for key, values in self.updates.items()}

    def close(self) -> None:
        self.consumer.close()
