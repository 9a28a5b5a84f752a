"""Transaction markers across brokers: Kafka's WriteTxnMarkers, sent to each partition leader.

Partitions this broker leads get their control batch written right away; the others are grouped
by leader and sent one WriteTxnMarkers request per leader. A partition without a live leader, or
a leader that cannot be reached, reports a retriable error and the transaction coordinator tries
it again — a transaction completes only when every partition has its marker.

A marker is written as Kafka writes it, with acks=all: refused before it is appended while the
partition's ISR is below min.insync.replicas, and reported written only once the in-sync
replicas have it (`replicated_marker`), on this broker and on the receiving end of
WriteTxnMarkers alike. Otherwise a leader that failed right after could lose the marker while
the coordinator logs the transaction complete, and never write it again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from strom.broker.core import Node
from strom.cluster.client import BrokerClient, BrokerClients, BrokerConnectionError
from strom.cluster.replication.manager import ReplicaManager
from strom.coordinator.group.coordinator import GroupCoordinator
from strom.coordinator.transaction.markers import MarkerResults, TopicPartition, TxnMarker
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, ProtocolError
from strom.record import control_batch
from strom.storage.errors import StorageError
from strom.storage.validator import ORIGIN_COORDINATOR

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_VERSION = 1
OFFSETS_TOPIC = "__consumer_offsets"


def write_marker(node: Node, groups: GroupCoordinator, topic: str, partition: int,
                 producer_id: int, producer_epoch: int, coordinator_epoch: int,
                 commit: bool, replicas: ReplicaManager | None = None) -> int:
    """Append one COMMIT/ABORT control batch to a partition this broker leads (Kafka's
    WriteTxnMarkers on the partition leader); returns a Kafka error code. With `replicas`
    (a cluster) it is refused first while the ISR is below min.insync.replicas. The group
    coordinator hears of markers in `__consumer_offsets` (transactional offset commits)."""
    t = node.image.topics.get(topic)
    state = t.partitions.get(partition) if t is not None else None
    if state is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    plog = node.partitions.get(topic, partition)
    if plog is None or state.leader != node.broker_id:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if replicas is not None:
        code = replicas.min_isr_error((topic, partition))
        if code:
            return code
    now = node.now_ms()
    batch = control_batch(commit=commit, producer_id=producer_id, producer_epoch=producer_epoch,
                          coordinator_epoch=coordinator_epoch, timestamp=now)
    try:
        plog.append(memoryview(bytearray(batch)), leader_epoch=state.leader_epoch, now_ms=now,
                    origin=ORIGIN_COORDINATOR)
    except StorageError as exc:
        log.warning("cannot write the %s marker of producer %d to %s-%d: %s",
                    "COMMIT" if commit else "ABORT", producer_id, topic, partition, exc)
        return exc.error_code
    node.partitions.waiters.notify((topic, partition))
    if topic == OFFSETS_TOPIC:
        groups.offsets.on_transaction_completed(partition, producer_id, commit)
    return ErrorCode.NONE


async def replicated_marker(node: Node, groups: GroupCoordinator, replicas: ReplicaManager | None,
                            topic: str, partition: int, producer_id: int, producer_epoch: int,
                            coordinator_epoch: int, commit: bool) -> int:
    """`write_marker` with acks=all: its error code once the partition's in-sync replicas have
    the marker (at once on a single node)."""
    code = write_marker(node, groups, topic, partition, producer_id, producer_epoch,
                        coordinator_epoch, commit, replicas)
    if code or replicas is None:
        return code
    plog = node.partitions.get(topic, partition)
    if plog is None:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return await replicas.wait_for_replication((topic, partition), plog.log_end_offset,
                                               node.config.get("request.timeout.ms") / 1000)


class ClusterMarkerWriter:
    """`MarkerWriter` for any partition: local writes for ours, WriteTxnMarkers for others."""

    def __init__(self, node: Node, groups: GroupCoordinator,
                 replicas: ReplicaManager | None = None) -> None:
        self.node = node
        self._groups = groups
        self._replicas = replicas
        self._clients = BrokerClients(f"strom-txn-markers-{node.broker_id}",
                                      node.config.get("replica.socket.timeout.ms") / 1000,
                                      node.inter_broker)
        self._writes: set[asyncio.Task[None]] = set()  # the loop holds tasks only weakly

    def write(self, marker: TxnMarker, done: Callable[[MarkerResults], None]) -> None:
        results: MarkerResults = {}
        remote: dict[int, list[TopicPartition]] = {}
        local: list[TopicPartition] = []
        image = self.node.image
        for tp in marker.partitions:
            topic = image.topics.get(tp[0])
            state = topic.partitions.get(tp[1]) if topic is not None else None
            if state is None:
                results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif state.leader == self.node.broker_id:
                if self._replicas is None:  # a single node: written is done
                    results[tp] = write_marker(
                        self.node, self._groups, tp[0], tp[1], marker.producer_id,
                        marker.producer_epoch, marker.coordinator_epoch, marker.commit)
                else:
                    local.append(tp)
            elif state.leader not in image.brokers:
                results[tp] = ErrorCode.LEADER_NOT_AVAILABLE
            else:
                remote.setdefault(state.leader, []).append(tp)
        if not remote and not local:
            done(results)
            return

        async def write_all() -> None:
            here = [replicated_marker(self.node, self._groups, self._replicas, tp[0], tp[1],
                                      marker.producer_id, marker.producer_epoch,
                                      marker.coordinator_epoch, marker.commit) for tp in local]
            there = [self._send(leader, marker, tps) for leader, tps in remote.items()]
            # every outcome is reported, a failure too: `done` left uncalled would leave the
            # transaction in Prepare* for good (what failed is retried by the coordinator)
            here_done, there_done = await asyncio.gather(
                asyncio.gather(*here, return_exceptions=True),
                asyncio.gather(*there, return_exceptions=True))
            for tp, code in zip(local, here_done, strict=True):
                results[tp] = self._code(code, marker)
            for tps, reply in zip(remote.values(), there_done, strict=True):
                if isinstance(reply, BaseException):
                    results.update(dict.fromkeys(tps, self._code(reply, marker)))
                else:
                    results.update(reply)
            done(results)

        task = asyncio.get_running_loop().create_task(write_all())
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    @staticmethod
    def _code(outcome: int | BaseException, marker: TxnMarker) -> int:
        if not isinstance(outcome, BaseException):
            return outcome
        log.error("writing the markers of producer %d failed", marker.producer_id,
                  exc_info=outcome)
        return ErrorCode.UNKNOWN_SERVER_ERROR

    def _client(self, leader: int) -> BrokerClient | None:
        info = self.node.image.brokers.get(leader)
        if info is None:
            return None
        return self._clients.get(leader, info.host, info.port)

    async def _send(self, leader: int, marker: TxnMarker,
                    tps: list[TopicPartition]) -> MarkerResults:
        failed: MarkerResults = dict.fromkeys(tps, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        client = self._client(leader)
        if client is None:
            return failed
        topics: dict[str, list[int]] = {}
        for topic, partition in tps:
            topics.setdefault(topic, []).append(partition)
        request = {"markers": [{
            "producer_id": marker.producer_id, "producer_epoch": marker.producer_epoch,
            "transaction_result": marker.commit,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
            "coordinator_epoch": marker.coordinator_epoch,
        }]}
        try:
            response = await client.request(ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION,
                                            request)
        except (BrokerConnectionError, ProtocolError) as exc:
            log.info("WriteTxnMarkers to broker %d failed: %s", leader, exc)
            return failed
        out: MarkerResults = {}
        for m in response.markers:
            for t in m.topics:
                for p in t.partitions:
                    out[(t.name, p.partition_index)] = int(p.error_code)
        for tp in tps:
            out.setdefault(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return out

    def close(self) -> None:
        self._clients.close()

