"""The share coordinator as a share-partition leader reaches it (`Persister`).

`LocalPersister` calls this broker's `ShareCoordinator`: enough on a single node, and the local
half of a cluster's persister (`strom.broker.share_persister.RoutingPersister`), which sends
the request to the leader of the key's `__share_group_state` partition when that is another
broker. A read of a share partition that was never initialized gives None (Kafka's coordinator
answers it with INVALID_REQUEST).
"""

from __future__ import annotations

from strom.coordinator.share.coordinator import ShareCoordinator, UninitializedSharePartition
from strom.coordinator.share.state import PartitionState, SharePartitionKey, StateBatch


class LocalPersister:
    """`Persister` over the share coordinator of this broker (NOT_COORDINATOR for keys whose
    partition it does not lead)."""

    def __init__(self, coordinator: ShareCoordinator) -> None:
        self.coordinator = coordinator

    async def initialize(self, key: SharePartitionKey, state_epoch: int,
                         start_offset: int) -> None:
        await self.coordinator.initialize(key, state_epoch, start_offset)

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> PartitionState | None:
        try:
            return await self.coordinator.read(key, leader_epoch)
        except UninitializedSharePartition:
            return None

    async def write(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: list[StateBatch],
                    delivery_complete_count: int = -1) -> None:
        await self.coordinator.write(key, state_epoch, leader_epoch, start_offset, batches,
                                     delivery_complete_count)

    async def delete(self, key: SharePartitionKey) -> None:
        await self.coordinator.delete(key)

    async def read_summary(self, key: SharePartitionKey) -> PartitionState:
        """State epoch, leader epoch, start offset (-1: never initialized) and delivery
        complete count, without batches (ReadShareGroupStateSummary)."""
        return self.coordinator.read_summary(key)
