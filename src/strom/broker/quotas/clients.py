"""The broker's client quota managers, one per quota key, as Kafka's QuotaManagers."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from strom.broker.quotas.manager import QuotaManager
from strom.cluster.image import MetadataImage
from strom.cluster.quotas import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
)
from strom.config.broker import BrokerConfig
from strom.protocol.errors import ErrorCode, KafkaError


@dataclass
class ClientQuotas:
    produce: QuotaManager  # producer_byte_rate: bytes of produce requests per second
    fetch: QuotaManager  # consumer_byte_rate: bytes of fetch responses per second
    request: QuotaManager  # request_percentage: % of the event loop's time
    mutations: QuotaManager  # controller_mutation_rate: partitions created or deleted per s
    image: MetadataImage  # where the quotas are set

    @property
    def active(self) -> bool:
        """Any quota set at all (else nothing is measured)."""
        return bool(self.image.client_quotas)

    @classmethod
    def build(cls, image: MetadataImage, config: BrokerConfig,
              clock: Callable[[], float] = time.monotonic) -> ClientQuotas:
        samples, window = config.get("quota.window.num"), config.get("quota.window.size.seconds")
        controller = (config.get("controller.quota.window.num"),
                      config.get("controller.quota.window.size.seconds"))
        return cls(
            QuotaManager(PRODUCER_BYTE_RATE, image, samples=samples, window_s=window, clock=clock),
            QuotaManager(CONSUMER_BYTE_RATE, image, samples=samples, window_s=window, clock=clock),
            # Kafka bounds a request-time throttle by one window
            QuotaManager(REQUEST_PERCENTAGE, image, samples=samples, window_s=window,
                         max_throttle_ms=window * 1000, clock=clock),
            QuotaManager(CONTROLLER_MUTATION_RATE, image, samples=controller[0],
                         window_s=controller[1], clock=clock),
            image,
        )

    @property
    def managers(self) -> tuple[QuotaManager, ...]:
        return (self.produce, self.fetch, self.request, self.mutations)

    def mutation(self, user: str, client_id: str, *, strict: bool) -> MutationQuota:
        return MutationQuota(self.mutations, user, client_id, strict)


class MutationQuota:
    """controller_mutation_rate for one request (KIP-599): the partitions it creates or
    deletes count. Strict (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+): a topic
    asked for while the client is already over its quota fails with THROTTLING_QUOTA_EXCEEDED;
    older versions are never refused, only throttled."""

    def __init__(self, manager: QuotaManager, user: str, client_id: str, strict: bool) -> None:
        self._manager = manager
        self._user, self._client_id = user, client_id
        self._strict = strict
        self.throttle_ms = 0

    def take(self, partitions: int) -> None:
        if self._strict:
            over = self._manager.throttle_now(self._user, self._client_id)
            if over:
                self.throttle_ms = max(self.throttle_ms, over)
                raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                                 "The throttling quota has been exceeded.")
        self.throttle_ms = max(self.throttle_ms, self._manager.record(
            self._user, self._client_id, partitions))
