"""An internal topic (`__consumer_offsets`, `__transaction_state`) as its coordinator sees it:
created on first use through the controller, and its partitions' logs where this broker leads.

The coordinators differ only in the topic's name and settings, which subclasses supply.
"""

from __future__ import annotations

import logging
import time

from strom.broker.core import Node, internal_rf
from strom.common.immediate import run_or_start
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.log import PartitionLog

logger = logging.getLogger(__name__)

TOO_FEW_LOG_S = 60.0  # "too few live brokers" is logged at most this often per topic


class InternalTopic:
    name: str

    def __init__(self, node: Node) -> None:
        self.node = node
        self._too_few_logged = -TOO_FEW_LOG_S

    def settings(self) -> tuple[int, int, dict[str, str]]:
        """(partitions, configured replication factor, topic configs)."""
        raise NotImplementedError

    def num_partitions(self) -> int | None:
        topic = self.node.image.topics.get(self.name)
        return len(topic.partitions) if topic is not None else None

    def create(self) -> int:
        """The partition count, creating the topic first if needed. A cluster's controller
        answers later, so until the topic exists this raises COORDINATOR_NOT_AVAILABLE (as
        Kafka does), and the client retries."""
        existing = self.num_partitions()
        if existing:
            return existing
        partitions, rf, configs = self.settings()
        controller = self.node.controller
        wanted, live = internal_rf(self.node, rf), len(self.node.image.brokers)
        if live < wanted and not controller.single_broker:
            self._too_few(wanted, live)
        try:
            done, topic = run_or_start(controller.immediate, lambda: controller.create_topic(
                self.name, partitions, wanted, None, configs),
                f"creating {self.name}")
            if not done or topic is None:  # (done: the topic came back)
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                 f"{self.name} is being created")
        except KafkaError as exc:
            if exc.code == ErrorCode.COORDINATOR_NOT_AVAILABLE:
                raise
            if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                return self.num_partitions() or 0
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"cannot create {self.name}: {exc}") from None
        return len(topic.partitions)

    def _too_few(self, wanted: int, live: int) -> None:
        """COORDINATOR_NOT_AVAILABLE until enough brokers are live (the client retries), with
        the reason, where "being created" said nothing of why it never was (Kafka logs the
        same reason); no creation is started meanwhile."""
        why = (f"{self.name} needs {wanted} live brokers for its replication factor and "
               f"{live} are live: it is created once enough are")
        now = time.monotonic()
        if now - self._too_few_logged >= TOO_FEW_LOG_S:
            self._too_few_logged = now
            logger.info("%s (the brokers may still be starting)", why)
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, why)

    def log(self, partition: int) -> PartitionLog | None:
        """The partition's log if this broker leads it, else None."""
        topic = self.node.image.topics.get(self.name)
        state = topic.partitions.get(partition) if topic is not None else None
        if state is None or state.leader != self.node.broker_id:
            return None
        return self.node.partitions.get(self.name, partition)

    def leader_epoch(self, partition: int) -> int:
        return self.node.partitions.leader_epoch(self.name, partition)
