"""Mutated frames on a KRaft node's CONTROLLER listener (issue 30): the quorum's own APIs (Vote,
BeginQuorumEpoch, Fetch of the metadata log, ...) and the brokers' requests to the active
controller (BrokerRegistration, BrokerHeartbeat, AlterPartition, ...), each an all-defaults
body at every version the listener advertises, mutated as tests/fuzz mutates client frames.

Whatever arrives, the node closes only that connection (as a malformed request, never as a
handler's crash) or answers: every node stays up, the quorum keeps a leader, and a well-behaved
client produces and reads back acks=all records after the fuzzing. The first run found two
crashes: an Envelope without principal bytes, a BrokerHeartbeat v0. (A *well-formed* request from a stranger on an unauthenticated CONTROLLER listener
is another matter: it is trusted, as Kafka trusts it; docs/security.md says to authenticate it.)
"""

from __future__ import annotations

import random
import socket
import struct
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.fuzz.frames import fuzz_seconds, mutate, random_mutations

from strom.broker.handlers import sasl
from strom.controller import broker_apis
from strom.controller.apis import ControllerRouter
from strom.protocol.codec import request_codec
from strom.protocol.header import encode_request_header

from ..broker import HOST

pytestmark = pytest.mark.timeout(180)

FRAMES = 3000
REPLY_WAIT = 0.1
SEED = 30


def _routes() -> dict[int, tuple[int, int]]:
    router = ControllerRouter(None, extra=[sasl, broker_apis])  # type: ignore[arg-type]
    return {k: (r.spec.min_version, r.spec.max_version) for k, r in router.routes.items()}


def _seeds() -> list[bytes]:
    out = []
    for api_key, (lo, hi) in sorted(_routes().items()):
        for version in range(lo, hi + 1):
            body = request_codec(api_key, version).encode({})
            out.append(encode_request_header(api_key, version, 7, "fuzz") + body)
    return out


def _send(port: int, frame: bytes) -> str:
    try:
        with socket.create_connection((HOST, port), timeout=2) as sock:
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            sock.settimeout(REPLY_WAIT)
            try:
                data = sock.recv(4)
            except TimeoutError:
                return "waited"
            return "answered" if data else "closed"
    except ConnectionResetError:
        return "closed"


def test_the_controller_listener_survives_mutated_frames(make_kraft_cluster) -> None:
    cluster = make_kraft_cluster(3)
    seeds = _seeds()
    assert len(seeds) > 50, len(seeds)
    rng = random.Random(SEED)
    budget = fuzz_seconds()
    deadline = time.monotonic() + (budget * 0.2 if budget else 120)
    counts: dict[str, int] = {}
    sent = 0
    while (sent < FRAMES or budget) and time.monotonic() < deadline:
        node = cluster.brokers[sent % 3]
        outcome = _send(node.controller_port, mutate(rng.choice(seeds), random_mutations(rng)))
        counts[outcome] = counts.get(outcome, 0) + 1
        sent += 1
    for b in cluster.brokers:
        assert b.running, b.log_tail()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("after-fuzz", 1, 3)])["after-fuzz"].result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(20):
        producer.produce("after-fuzz", f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "after-fuzz",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["after-fuzz"])
    got = []
    end = time.monotonic() + 30
    while len(got) < 20 and time.monotonic() < end:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))
    # malformed input is closed as such (INFO), never as a handler's crash (ERROR)
    crashes = [line for b in cluster.brokers for line in b.log_text().splitlines()
               if "after an unexpected error" in line]
    assert crashes == [], crashes[:5]
    print(f"{sent} frames: {counts}")
