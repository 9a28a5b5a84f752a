"""Transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
WriteTxnMarkers, DescribeTransactions and ListTransactions (InitProducerId lives in
`cluster.py`, FindCoordinator in `groups.py`).

The handlers translate between the wire and `strom.coordinator.transaction`; the semantics live
there. The coordinator is wired in `strom.broker.wiring`: it reaches this broker through
`TxnTopicAdapter` (`__transaction_state`) and `strom.broker.markers.ClusterMarkerWriter`, which
writes COMMIT/ABORT control batches into partitions this broker leads and sends WriteTxnMarkers
to the leaders of the others; the WriteTxnMarkers handler below is the receiving end of that.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from strom.broker.authz import Op, Res, allowed, cluster_allowed, requires
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.markers import OFFSETS_TOPIC, replicated_marker
from strom.broker.request_types import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    ListTransactionsRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)
from strom.broker.router import handles
from strom.cluster.image import BrokerInfo
from strom.coordinator.transaction.store import TRANSACTION_STATE_TOPIC
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError


def transaction_coordinator_node(broker: Broker, transactional_id: str) -> BrokerInfo:
    """FindCoordinator(key type transaction): the leader of the id's `__transaction_state`
    partition (the topic is created on first use). Raises KafkaError."""
    coordinator = broker.transactions
    if not transactional_id:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "The transactional id must not be empty.")
    coordinator.ensure_topic()
    partition = coordinator.partition_for(transactional_id)
    topic = broker.image.topics.get(TRANSACTION_STATE_TOPIC)
    state = topic.partitions.get(partition) if topic is not None else None
    node = broker.image.brokers.get(state.leader) if state is not None else None
    if node is None:
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         f"{TRANSACTION_STATE_TOPIC}-{partition} has no live leader.")
    if node.broker_id == broker.broker_id and not coordinator.is_local(transactional_id):
        # Led here but not taken up yet (a new topic's logs are made in the background): the
        # client retries instead of meeting NOT_COORDINATOR, as with Kafka's new topics.
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         f"{TRANSACTION_STATE_TOPIC}-{partition} is not loaded yet.")
    return node


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _known(broker: Broker, topic: str, partition: int) -> bool:
    t = broker.image.topics.get(topic)
    return t is not None and partition in t.partitions


def _fenced_for(version: int, code: int) -> int:
    """PRODUCER_FENCED is new in v2 of AddPartitionsToTxn, AddOffsetsToTxn and EndTxn; older
    clients are told INVALID_PRODUCER_EPOCH (which they understand), as Kafka does."""
    if version < 2 and code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


# --------------------------------------------------------------------------------------------
# AddPartitionsToTxn, AddOffsetsToTxn, EndTxn
# --------------------------------------------------------------------------------------------


def _add_partitions_result(broker: Broker, tid: str, pid: int, epoch: int, topics: Any,
                           verify_only: bool, version: int) -> dict[str, list[tuple[int, int]]]:
    """{topic: [(partition, error)]} for one transaction of an AddPartitionsToTxn request."""
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    unknown = [tp for tp in wanted if not _known(broker, *tp)]
    if unknown:  # as Kafka: nothing is attempted when a partition does not exist
        codes: dict[tuple[str, int], int] = {tp: (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                      else ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted}
    else:
        try:
            coordinator = broker.transactions
            if verify_only:
                codes = coordinator.verify_partitions(tid, pid, epoch, wanted)
                if version < 5:  # TRANSACTION_ABORTABLE is new in v5 (KIP-890)
                    codes = {tp: (ErrorCode.INVALID_TXN_STATE
                                  if c == ErrorCode.TRANSACTION_ABORTABLE else c)
                             for tp, c in codes.items()}
            else:  # v4+ comes from brokers adding for transaction-version-2 producers
                code = coordinator.add_partitions(tid, pid, epoch, wanted,
                                                  client_tv=2 if version >= 4 else 1)
                codes = dict.fromkeys(wanted, code)
        except KafkaError as exc:
            codes = dict.fromkeys(wanted, exc.code)
    codes = {tp: _fenced_for(version, c) for tp, c in codes.items()}
    out: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), code in codes.items():
        out.setdefault(topic, []).append((partition, int(code)))
    return out


def _refused_partitions(broker: Broker, ctx: RequestContext, tid: str,
                        topics: Any) -> dict[str, list[tuple[int, int]]] | None:
    """ACLs of a client's AddPartitionsToTxn: WRITE on the transactional id (else every
    partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then WRITE on each topic (the refused
    ones TOPIC_AUTHORIZATION_FAILED, the rest OPERATION_NOT_ATTEMPTED); None: allowed."""
    if broker.authorizer is None:
        return None
    if not allowed(broker, ctx, Op.WRITE, Res.TRANSACTIONAL_ID, tid):
        return {t.name: [(p, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                         for p in t.partitions] for t in topics}
    denied = {t.name for t in topics if not allowed(broker, ctx, Op.WRITE, Res.TOPIC, t.name)}
    if not denied:
        return None
    return {t.name: [(p, ErrorCode.TOPIC_AUTHORIZATION_FAILED if t.name in denied
                      else ErrorCode.OPERATION_NOT_ATTEMPTED) for p in t.partitions]
            for t in topics}


def _topic_results(by_topic: dict[str, list[tuple[int, int]]]) -> list[dict[str, Any]]:
    return [{"name": topic, "results_by_partition": [
        {"partition_index": p, "partition_error_code": code} for p, code in rows]}
        for topic, rows in by_topic.items()]


@handles(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5)
def add_partitions_to_txn(broker: Broker, ctx: RequestContext,
                          request: AddPartitionsToTxnRequest) -> dict[str, Any]:
    """v0-3: one transaction (clients); v4+: a batch of transactions, possibly verify-only (the
    shape brokers use to check a partition is in a transaction before appending, KIP-890)."""
    version = ctx.api_version
    if version < 4:
        tid, topics = request.v3_and_below_transactional_id, request.v3_and_below_topics
        refused = _refused_partitions(broker, ctx, tid, topics)
        by_topic = refused if refused is not None else _add_partitions_result(
            broker, tid, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch, topics, False, version)
        return {"throttle_time": 0, "results_by_topic_v3_and_below": _topic_results(by_topic)}
    if not cluster_allowed(broker, ctx, Op.CLUSTER_ACTION):  # v4+: brokers only
        return {"throttle_time": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "results_by_transaction": []}
    results = []
    for txn in request.transactions:
        by_topic = _add_partitions_result(broker, txn.transactional_id, txn.producer_id,
                                          txn.producer_epoch, txn.topics, txn.verify_only,
                                          version)
        results.append({"transactional_id": txn.transactional_id,
                        "topic_results": _topic_results(by_topic)})
    return {"throttle_time": 0, "error_code": 0, "results_by_transaction": results}


@handles(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4)
@requires(Op.WRITE, Res.TRANSACTIONAL_ID, lambda r: r.transactional_id,
          ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
@requires(Op.READ, Res.GROUP, lambda r: r.group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
def add_offsets_to_txn(broker: Broker, ctx: RequestContext,
                       request: AddOffsetsToTxnRequest) -> dict[str, Any]:
    """Adds the group's `__consumer_offsets` partition to the transaction (Kafka's way of
    making TxnOffsetCommit part of it)."""
    try:
        groups = broker.groups
        if not request.group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID)
        groups.ensure_offsets_topic()
        partition = groups.partition_for(request.group_id)
        code = broker.transactions.add_partitions(request.transactional_id, request.producer_id,
                                                   request.producer_epoch,
                                                   [(OFFSETS_TOPIC, partition)])
    except KafkaError as exc:
        code = exc.code
    return {"throttle_time": 0, "error_code": int(_fenced_for(ctx.api_version, code))}


@handles(ApiKey.END_TXN, 0, 5)
@requires(Op.WRITE, Res.TRANSACTIONAL_ID, lambda r: r.transactional_id,
          ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
def end_txn(broker: Broker, ctx: RequestContext, request: EndTxnRequest) -> dict[str, Any]:
    """v5 is transaction version 2: the coordinator bumps the producer epoch on every EndTxn
    and answers with the producer id and epoch the producer goes on with."""
    version = ctx.api_version
    try:
        code, producer_id, epoch = broker.transactions.end_transaction_result(
            request.transactional_id, request.producer_id, request.producer_epoch,
            request.committed, client_tv=2 if version >= 5 else 1)
    except KafkaError as exc:
        code, producer_id, epoch = exc.code, -1, -1
    return {"throttle_time": 0, "error_code": int(_fenced_for(version, code)),
            "producer_id": producer_id, "producer_epoch": epoch}


# --------------------------------------------------------------------------------------------
# TxnOffsetCommit (served by the group coordinator)
# --------------------------------------------------------------------------------------------


@handles(ApiKey.TXN_OFFSET_COMMIT, 0, 5)
def txn_offset_commit(broker: Broker, ctx: RequestContext, request: TxnOffsetCommitRequest
                      ) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    """Offsets committed within a transaction (applied when its COMMIT marker lands in
    `__consumer_offsets`). The group's offsets partition must be part of the transaction
    (KIP-890): up to v4 the producer added it (AddOffsetsToTxn) and the coordinator verifies;
    v5 (transaction version 2) has the coordinator add it on the producer's behalf."""
    out_topics: list[dict[str, Any]] = []
    commit: list[tuple[str, list[tuple[int, int, int, str | None]]]] = []
    slots: dict[tuple[str, int], dict[str, Any]] = {}
    # ACLs: WRITE on the transactional id, READ on the group (either refuses every
    # partition), READ on each topic
    whole = (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
             if not allowed(broker, ctx, Op.WRITE, Res.TRANSACTIONAL_ID,
                            request.transactional_id)
             else ErrorCode.GROUP_AUTHORIZATION_FAILED
             if not allowed(broker, ctx, Op.READ, Res.GROUP, request.group_id) else None)
    for t in request.topics:
        parts: list[dict[str, Any]] = []
        out_topics.append({"name": t.name, "partitions": parts})
        wanted = []
        refused = whole or (ErrorCode.TOPIC_AUTHORIZATION_FAILED
                            if not allowed(broker, ctx, Op.READ, Res.TOPIC, t.name) else None)
        for p in t.partitions:
            slot = {"partition_index": p.partition_index, "error_code": 0}
            parts.append(slot)
            if refused is not None:
                slot["error_code"] = int(refused)
                continue
            if not _known(broker, t.name, p.partition_index):
                slot["error_code"] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            slots[(t.name, p.partition_index)] = slot
            wanted.append((p.partition_index, p.committed_offset, p.committed_leader_epoch,
                           p.committed_metadata))
        if wanted:
            commit.append((t.name, wanted))
    reply = {"throttle_time": 0, "topics": out_topics}
    if not commit:
        return reply
    groups = broker.groups
    if not request.group_id:
        return _fail_slots(reply, slots, ErrorCode.INVALID_GROUP_ID)
    try:
        groups.ensure_offsets_topic()
        offsets_tp = (OFFSETS_TOPIC, groups.partition_for(request.group_id))
    except KafkaError as exc:
        return _fail_slots(reply, slots, exc.code)
    checked = broker.txn_gate.check(request.transactional_id, request.producer_id,
                                    request.producer_epoch, [offsets_tp],
                                    add=ctx.api_version >= 5)
    if isinstance(checked, Awaitable):
        async def after_check() -> dict[str, Any]:
            codes = await checked
            return _commit_in_txn(broker, ctx, request, commit, reply, slots,
                                  codes[offsets_tp])
        return after_check()
    return _commit_in_txn(broker, ctx, request, commit, reply, slots, checked[offsets_tp])


def _fail_slots(reply: dict[str, Any], slots: dict[tuple[str, int], dict[str, Any]],
                code: int) -> dict[str, Any]:
    for slot in slots.values():
        slot["error_code"] = int(code)
    return reply


def _commit_in_txn(broker: Broker, ctx: RequestContext, request: TxnOffsetCommitRequest,
                   commit: list, reply: dict[str, Any],
                   slots: dict[tuple[str, int], dict[str, Any]], code: int) -> dict[str, Any]:
    """The commit itself, once the offsets partition is known to be in the transaction."""
    if code == ErrorCode.TRANSACTION_ABORTABLE and ctx.api_version < 5:
        code = ErrorCode.INVALID_TXN_STATE  # TRANSACTION_ABORTABLE needs v5
    if code == ErrorCode.PRODUCER_FENCED:
        code = ErrorCode.INVALID_PRODUCER_EPOCH  # as Kafka answers TxnOffsetCommit
    if code:
        return _fail_slots(reply, slots, code)
    try:
        results = broker.groups.offsets.commit_transactional_offsets(
            request.group_id, request.producer_id, request.producer_epoch,
            request.member_id, request.generation_id, request.group_instance_id, commit)
    except KafkaError as exc:
        return _fail_slots(reply, slots, exc.code)
    for name, rows in results:
        for partition, row_code in rows:
            slots[(name, partition)]["error_code"] = int(row_code)
    return reply


# --------------------------------------------------------------------------------------------
# WriteTxnMarkers (sent by a transaction coordinator to partition leaders)
# --------------------------------------------------------------------------------------------


@handles(ApiKey.WRITE_TXN_MARKERS, 1, 2)
def write_txn_markers(broker: Broker, ctx: RequestContext, request: WriteTxnMarkersRequest
                      ) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    """Each marker is written with acks=all (as Kafka's): its partition's code comes once the
    in-sync replicas have it (at once on a single node)."""
    if not cluster_allowed(broker, ctx, Op.CLUSTER_ACTION):  # brokers only
        return {"markers": [{"producer_id": m.producer_id, "topics": [
            {"name": t.name, "partitions": [
                {"partition_index": p,
                 "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)}
                for p in t.partition_indexes]} for t in m.topics]} for m in request.markers]}
    return _write_markers(broker, request)


async def _write_markers(broker: Broker, request: WriteTxnMarkersRequest) -> dict[str, Any]:
    markers = []
    for m in request.markers:
        wanted = [(t.name, p) for t in m.topics for p in t.partition_indexes]
        codes = await asyncio.gather(*(replicated_marker(
            broker, broker.groups, broker.replicas, topic, p, m.producer_id, m.producer_epoch,
            m.coordinator_epoch, m.transaction_result) for topic, p in wanted))
        by_topic: dict[str, list[dict[str, int]]] = {}
        for (topic, p), code in zip(wanted, codes, strict=True):
            by_topic.setdefault(topic, []).append({"partition_index": p,
                                                   "error_code": int(code)})
        markers.append({"producer_id": m.producer_id, "topics": [
            {"name": name, "partitions": parts} for name, parts in by_topic.items()]})
    return {"markers": markers}


# --------------------------------------------------------------------------------------------
# DescribeTransactions, ListTransactions
# --------------------------------------------------------------------------------------------


@handles(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0)
def describe_transactions(broker: Broker, ctx: RequestContext,
                          request: DescribeTransactionsRequest) -> dict[str, Any]:
    ids = list(request.transactional_ids)
    refused = [t for t in ids if not allowed(broker, ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID, t)]
    ids = [t for t in ids if t not in refused]

    def failed(tid: str, code: int) -> dict[str, Any]:
        return {"transactional_id": tid, "error_code": code, "transaction_state": "",
                "transaction_timeout": 0, "transaction_start_time": -1, "producer_id": -1,
                "producer_epoch": -1, "topics": []}

    try:
        states = broker.transactions.describe_transactions(ids) if ids else []
    except KafkaError as exc:
        states = [failed(tid, int(exc.code)) for tid in ids]
    states = list(states) + [failed(t, int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
                             for t in refused]
    return {"throttle_time": 0, "transaction_states": states}


@handles(ApiKey.LIST_TRANSACTIONS, 0, 2)
def list_transactions(broker: Broker, ctx: RequestContext,
                      request: ListTransactionsRequest) -> dict[str, Any]:
    try:
        result = broker.transactions.list_transactions(
            list(request.state_filters), list(request.producer_id_filters),
            request.duration_filter, request.transactional_id_pattern)
    except KafkaError as exc:
        result = {"error_code": int(exc.code), "unknown_state_filters": [],
                  "transaction_states": []}
    if broker.authorizer is not None:  # only the transactions the principal may describe
        result["transaction_states"] = [
            s for s in result["transaction_states"]
            if allowed(broker, ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID, s["transactional_id"])]
    return {"throttle_time": 0, **result}
