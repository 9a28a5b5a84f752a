"""The check before a transaction's first write to a partition (Kafka's AddPartitionsToTxnManager).

A partition leader must not append a transactional batch for a transaction the coordinator does
not know includes the partition (KIP-890): a late write of a fenced or aborted producer would
otherwise open a transaction nobody closes, and hold back every read_committed consumer.

- Clients on transaction version 1 (Produce up to v11, TxnOffsetCommit up to v4) add their
  partitions themselves (AddPartitionsToTxn); the leader only *verifies*.
- Clients on transaction version 2 (Produce v12+, TxnOffsetCommit v5) never send
  AddPartitionsToTxn: the leader *adds* the partition on the producer's behalf.

The transaction coordinator may be this broker (a direct call) or another one (an
AddPartitionsToTxn v5 request, the broker-to-broker batch form, sent to it). Answers are per
partition: Kafka error codes from the coordinator's point of view; callers map them to what
their request version can carry.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any, Protocol

from strom.cluster.client import BrokerClient, BrokerClients, BrokerConnectionError
from strom.cluster.features import finalized_level
from strom.cluster.image import MetadataImage
from strom.config.broker import BrokerConfig
from strom.coordinator.transaction.coordinator import TransactionCoordinator
from strom.coordinator.transaction.markers import TopicPartition
from strom.coordinator.transaction.store import TRANSACTION_STATE_TOPIC
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, ProtocolError
from strom.record import HEADER_STRUCT, RECORD_BATCH_OVERHEAD, TRANSACTIONAL_MASK
from strom.security.client import ClientSecurity

log = logging.getLogger(__name__)

ADD_PARTITIONS_VERSION = 5  # the broker-to-broker form with TRANSACTION_ABORTABLE
Codes = dict[TopicPartition, int]


class GateNode(Protocol):
    """What the gate reads of its broker (a `strom.broker.core.Node`)."""

    broker_id: int
    image: MetadataImage
    config: BrokerConfig
    inter_broker: ClientSecurity


class TxnPartitionGate:
    """Verifies (transaction version 1) or adds (version 2) a transaction's partitions with
    its coordinator, wherever that coordinator runs."""

    def __init__(self, node: GateNode, coordinator: TransactionCoordinator) -> None:
        self.node = node
        self.coordinator = coordinator
        self._clients = BrokerClients(f"strom-txn-verify-{node.broker_id}",
                                      node.config.get("replica.socket.timeout.ms") / 1000,
                                      node.inter_broker)

    def check(self, transactional_id: str, producer_id: int, producer_epoch: int,
              partitions: list[TopicPartition], *, add: bool) -> Codes | Awaitable[Codes]:
        """Per partition: NONE when the transaction includes it (after adding it when `add`),
        else the coordinator's error. Synchronous when the coordinator is this broker."""
        coordinator = self.coordinator
        if not transactional_id:
            return dict.fromkeys(partitions, ErrorCode.INVALID_REQUEST)
        if coordinator.is_local(transactional_id):
            if add:
                code = coordinator.add_partitions(transactional_id, producer_id, producer_epoch,
                                                  partitions, client_tv=2)
                return dict.fromkeys(partitions, code)
            return coordinator.verify_partitions(transactional_id, producer_id, producer_epoch,
                                                 partitions)
        leader = self._coordinator_broker(transactional_id)
        if leader is None:
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return self._remote(leader, transactional_id, producer_id, producer_epoch, partitions,
                            add)

    def _coordinator_broker(self, transactional_id: str) -> int | None:
        """The live leader of the id's `__transaction_state` partition, if any."""
        image = self.node.image
        topic = image.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None or not topic.partitions:
            return None
        state = topic.partitions.get(self.coordinator.partition_for(transactional_id))
        if state is None or state.leader not in image.brokers:
            return None
        return state.leader

    def _client(self, broker_id: int) -> BrokerClient | None:
        info = self.node.image.brokers.get(broker_id)
        if info is None:
            return None
        return self._clients.get(broker_id, info.host, info.port)

    async def _remote(self, broker_id: int, transactional_id: str, producer_id: int,
                      producer_epoch: int, partitions: list[TopicPartition],
                      add: bool) -> Codes:
        failed: Codes = dict.fromkeys(partitions, ErrorCode.NOT_COORDINATOR)
        client = self._client(broker_id)
        if client is None:
            return failed
        topics: dict[str, list[int]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(partition)
        request = {"transactions": [{
            "transactional_id": transactional_id, "producer_id": producer_id,
            "producer_epoch": producer_epoch, "verify_only": not add,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }]}
        try:
            response = await client.request(ApiKey.ADD_PARTITIONS_TO_TXN,
                                            ADD_PARTITIONS_VERSION, request)
        except (BrokerConnectionError, ProtocolError) as exc:
            log.info("AddPartitionsToTxn to the transaction coordinator %d failed: %s",
                     broker_id, exc)
            return failed
        if response.error_code:
            return dict.fromkeys(partitions, int(response.error_code))
        out: Codes = {}
        for txn in response.results_by_transaction:
            for t in txn.topic_results:
                for p in t.results_by_partition:
                    out[(t.name, p.partition_index)] = int(p.partition_error_code)
        for tp in partitions:
            out.setdefault(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
        return out

    def close(self) -> None:
        self._clients.close()


# -- Produce: the transactional batches of one request -------------------------------------

# coordinator errors a producer retries on; Produce carries them as NOT_ENOUGH_REPLICAS, as
# Kafka does, so that every client version retries
_RETRIABLE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                        ErrorCode.CONCURRENT_TRANSACTIONS})


class ProducerStates(Protocol):
    """The producer state of one partition log (`strom.storage.producer_state`)."""

    producers: dict[int, Any]


def first_writes(batches: Iterable[tuple[TopicPartition, ProducerStates, memoryview]]
                 ) -> tuple[int, int, list[TopicPartition]] | None:
    """(producer id, epoch, partitions) of the transactional batches that would open the
    producer's transaction in their partition (the ones the coordinator must vouch for);
    None when there are none. Later batches of an open transaction need no check."""
    pid = epoch = -1
    wanted: list[TopicPartition] = []
    for tp, state, records in batches:
        if records is None or len(records) < RECORD_BATCH_OVERHEAD:
            continue
        header = HEADER_STRUCT.unpack_from(records, 0)
        if not header[5] & TRANSACTIONAL_MASK:
            continue
        pid, epoch = header[9], header[10]
        entry = state.producers.get(pid)
        if entry is not None and entry.epoch == epoch and entry.txn_first_offset >= 0:
            continue
        wanted.append(tp)
    return (pid, epoch, wanted) if wanted else None


ProduceVerdicts = dict[TopicPartition, tuple[int, str | None]]


def produce_codes(codes: Codes, version: int) -> ProduceVerdicts:
    """Coordinator answers as Produce of `version` reports them, with Kafka's messages
    (ReplicaManager's translation of verification errors): retriable coordinator states become
    NOT_ENOUGH_REPLICAS (every client version retries it without a metadata refresh), a fenced
    producer INVALID_PRODUCER_EPOCH, TRANSACTION_ABORTABLE needs v11+."""
    out: ProduceVerdicts = {}
    for tp, code in codes.items():
        message = None
        if code in _RETRIABLE:
            message = ("Unable to verify the partition has been added to the transaction. "
                       f"Underlying error: {ErrorCode(code).name}")
            code = ErrorCode.NOT_ENOUGH_REPLICAS
        elif code == ErrorCode.PRODUCER_FENCED:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
        elif code == ErrorCode.TRANSACTION_ABORTABLE and version < 11:
            code = ErrorCode.INVALID_TXN_STATE
        if code == ErrorCode.INVALID_TXN_STATE:
            message = "Partition was not added to the transaction"
        out[tp] = (int(code), message)
    return out


def adds_partitions(produce_version: int, finalized: Mapping[str, int] | None = None) -> bool:
    """Produce v12+ comes from producers on transaction version 2, which leave adding the
    partition to the leader (when the cluster has finalized that version: `finalized`, the
    metadata image's levels)."""
    return produce_version >= 12 and finalized_level("transaction.version", finalized) >= 2
