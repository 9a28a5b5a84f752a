"""A transaction's first write to a partition is checked with its coordinator on another broker.

KIP-890: a partition leader asks the transaction coordinator before it appends a transactional
batch that would open a transaction in the partition — verify-only for producers on
transaction version 1 (Produce up to v11, which added the partition themselves), an add on
the producer's behalf for transaction version 2 (Produce v12+, which never send
AddPartitionsToTxn). Here the leader and the coordinator are different brokers, so the check
travels as AddPartitionsToTxn v5 between them (it used to be skipped).

The requests are built with Strom's schema codec: Produce v11/v12 and EndTxn v5 are flexible
versions the hand-written wire helper does not speak.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import Struct, request_codec, response_codec
from strom.protocol.errors import ErrorCode as E
from strom.protocol.header import decode_response_header, encode_request_header
from strom.record import Record, build_batch

from .faults import wait_for

pytestmark = pytest.mark.timeout(240)

_SIZE = struct.Struct(">i")


class Wire:
    """One connection to one broker, speaking any version Strom's codec has."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.correlation = 0

    def request(self, api_key: ApiKey, version: int, body: dict[str, Any]) -> Struct:
        self.correlation += 1
        payload = (encode_request_header(api_key, version, self.correlation, "txn-verify-test")
                   + request_codec(api_key, version).encode(body))
        self.sock.sendall(_SIZE.pack(len(payload)) + payload)
        size = _SIZE.unpack(self._read(4))[0]
        frame = self._read(size)
        codec = response_codec(api_key, version)
        got, pos = decode_response_header(frame, 0, codec.header_version)
        assert got == self.correlation
        value, _ = codec.decode(memoryview(frame), pos)
        return value

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            assert chunk, "the broker closed the connection"
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()


def _coordinator(wire: Wire, tid: str) -> int:
    def found() -> int | None:
        r = wire.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [tid]})
        c = r.coordinators[0]
        return c.node_id if c.error_code == 0 else None

    return wait_for(found, 60, f"a coordinator for {tid}")


def _leaders(wire: Wire, topic: str) -> dict[int, int]:
    r = wire.request(ApiKey.METADATA, 12, {"topics": [{"name": topic}],
                                          "allow_auto_topic_creation": False})
    return {p.partition_index: p.leader_id for p in r.topics[0].partitions}


def _produce(wire: Wire, version: int, tid: str, topic: str, partition: int, pid: int,
             epoch: int, seq: int, value: bytes) -> int:
    return _produce_response(wire, version, tid, topic, partition, pid, epoch, seq,
                             value).error_code


def _produce_response(wire: Wire, version: int, tid: str, topic: str, partition: int,
                      pid: int, epoch: int, seq: int, value: bytes) -> Struct:
    batch = build_batch([Record(offset=0, timestamp=int(time.time() * 1000), key=None,
                                value=value)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        transactional=True)
    r = wire.request(ApiKey.PRODUCE, version, {
        "transactional_id": tid, "acks": -1, "timeout": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition,
                                                           "records": batch}]}]})
    return r.responses[0].partition_responses[0]


def _setup(request: Any, cluster: Any, topic: str,
           tid: str) -> tuple[dict[int, Wire], int, int, int]:
    """Wires to every broker (closed after the test), the coordinator of `tid`, a partition it
    does not lead, and that partition's leader."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wait_for(lambda: len(admin.list_topics(timeout=10).brokers) == 3, 30, "3 brokers")
    admin.create_topics([NewTopic(topic, 6, 1)], operation_timeout=30)[topic].result(40)
    wires = {i: Wire(b.bootstrap) for i, b in enumerate(cluster.brokers, start=1)}
    for wire in wires.values():
        request.addfinalizer(wire.close)
    coordinator = _coordinator(next(iter(wires.values())), tid)
    leaders = wait_for(lambda: (lambda ls: ls if all(v >= 0 for v in ls.values()) else None)(
        _leaders(wires[coordinator], topic)), 30, "leaders")
    partition = next(p for p, leader in sorted(leaders.items()) if leader != coordinator)
    return wires, coordinator, partition, leaders[partition]


def _init(wire: Wire, tid: str) -> tuple[int, int]:
    def init() -> tuple[int, int] | None:
        r = wire.request(ApiKey.INIT_PRODUCER_ID, 5, {"transactional_id": tid,
                                                      "transaction_timeout": 10000,
                                                      "producer_id": -1, "producer_epoch": -1})
        assert r.error_code == 0, E(r.error_code).name
        return (r.producer_id, r.producer_epoch)

    return wait_for(init, 60, "InitProducerId")


def _end_txn(wire: Wire, version: int, tid: str, pid: int, epoch: int, commit: bool) -> Struct:
    return wire.request(ApiKey.END_TXN, version, {"transactional_id": tid, "producer_id": pid,
                                                  "producer_epoch": epoch, "committed": commit})


def _describe(wire: Wire, tid: str) -> Struct:
    return wire.request(ApiKey.DESCRIBE_TRANSACTIONS, 0,
                        {"transactional_ids": [tid]}).transaction_states[0]


def test_tv1_write_to_a_partition_not_in_the_transaction_is_refused(make_cluster, request):
    cluster = make_cluster(3)
    tid = "tv1-producer"
    wires, coordinator, partition, leader = _setup(request, cluster, "tv1", tid)
    pid, epoch = _init(wires[coordinator], tid)
    # no AddPartitionsToTxn: the remote coordinator says the partition is not in a transaction
    r = _produce_response(wires[leader], 10, tid, "tv1", partition, pid, epoch, 0, b"stray")
    assert r.error_code == E.INVALID_TXN_STATE
    assert r.error_message == "Partition was not added to the transaction"  # Kafka's text
    code = _produce(wires[leader], 11, tid, "tv1", partition, pid, epoch, 0, b"stray")
    assert code == E.TRANSACTION_ABORTABLE  # v11 understands it
    # after adding it, the same write goes through
    r = wires[coordinator].request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": "tv1", "partitions": [partition]}]})
    assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    assert _produce(wires[leader], 11, tid, "tv1", partition, pid, epoch, 0, b"ok") == E.NONE
    assert _end_txn(wires[coordinator], 4, tid, pid, epoch, True).error_code == 0
    # a fenced producer's write is refused through the remote check too
    new_pid, new_epoch = _init(wires[coordinator], tid)
    assert (new_pid, new_epoch) == (pid, epoch + 1)
    code = _produce(wires[leader], 11, tid, "tv1", partition, pid, epoch, 1, b"late")
    assert code == E.INVALID_PRODUCER_EPOCH


def test_tv2_leader_adds_the_partition_and_end_txn_bumps_the_epoch(make_cluster, request):
    cluster = make_cluster(3)
    tid = "tv2-producer"
    wires, coordinator, partition, leader = _setup(request, cluster, "tv2", tid)
    pid, epoch = _init(wires[coordinator], tid)
    # Produce v12 without AddPartitionsToTxn: the leader adds the partition at the coordinator
    assert _produce(wires[leader], 12, tid, "tv2", partition, pid, epoch, 0, b"one") == E.NONE
    state = _describe(wires[coordinator], tid)
    assert state.transaction_state == "Ongoing"
    assert [(t.topic, list(t.partitions)) for t in state.topics] == [("tv2", [partition])]
    r = _end_txn(wires[coordinator], 5, tid, pid, epoch, True)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, epoch + 1)
    wait_for(lambda: _describe(wires[coordinator], tid).transaction_state == "CompleteCommit",
             30, "the commit to complete")
    # the old epoch is fenced at the leader; the bumped one opens the next transaction
    assert _produce(wires[leader], 12, tid, "tv2", partition, pid, epoch, 1, b"late") == \
        E.INVALID_PRODUCER_EPOCH
    assert _produce(wires[leader], 12, tid, "tv2", partition, pid, epoch + 1, 0, b"two") == \
        E.NONE
    assert _describe(wires[coordinator], tid).producer_epoch == epoch + 1
    r = _end_txn(wires[coordinator], 5, tid, pid, epoch + 1, False)
    assert (r.error_code, r.producer_epoch) == (0, epoch + 2)
