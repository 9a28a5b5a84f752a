"""Mutated frames on a KRaft cluster's listeners (issue 30). The CONTROLLER listeners: the
quorum's own APIs (Vote, BeginQuorumEpoch, Fetch of the metadata log, ...) and the brokers'
requests to the active controller (BrokerRegistration, BrokerHeartbeat, AlterPartition, ...),
each an all-defaults body at every version the listener advertises, mutated as tests/fuzz
mutates client frames. Then the client listeners, with tests/fuzz's client seeds: there admin
requests reach the active controller forwarded in an Envelope, undecoded.

Whatever arrives, a node closes only that connection (as a malformed request, never as a
handler's crash) or answers: every node stays up, and a well-behaved client produces and reads
back acks=all records after each round. The first run found two crashes: an Envelope without
principal bytes, a BrokerHeartbeat v0. (A well-formed request from a stranger is another
matter: a node trusts it as Kafka's does unless the listener authenticates and ACLs restrict
it, docs/security.md.)
"""

from __future__ import annotations

import random
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.fuzz.frames import fuzz_seconds, mutate, random_mutations, routes, seeds_for

from strom.broker.handlers import sasl
from strom.controller import broker_apis
from strom.controller.apis import ControllerRouter
from strom.protocol.codec import request_codec
from strom.protocol.header import encode_request_header

from ..broker import HOST

pytestmark = pytest.mark.timeout(180)

FRAMES = 2000
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


def test_a_kraft_cluster_survives_mutated_frames_on_both_listeners(make_kraft_cluster) -> None:
    cluster = make_kraft_cluster(3)
    controller_seeds = _seeds()
    assert len(controller_seeds) > 50, len(controller_seeds)
    budget = fuzz_seconds()
    sent = _fuzz(cluster, controller_seeds, lambda b: b.controller_port, SEED,
                 budget * 0.2 if budget else None)
    _check_serving(cluster, "after-controller-fuzz")
    print(f"CONTROLLER listeners: {sent}")
    # the client listeners: admin requests that reach a broker which is not the active
    # controller go to it in an Envelope, undecoded: a malformed one is its to refuse
    client_seeds = [s.frame for k in sorted(routes()) for s in seeds_for(k)]
    sent = _fuzz(cluster, client_seeds, lambda b: b.port, SEED + 1,
                 budget * 0.1 if budget else None)
    _check_serving(cluster, "after-client-fuzz")
    print(f"client listeners: {sent}")


def _fuzz(cluster, seeds: list[bytes], port: Callable[[Any], int], seed: int,
          seconds: float | None) -> dict[str, int]:
    """FRAMES mutated seeds round the nodes (or as many as `seconds` allow): outcome counts."""
    rng = random.Random(seed)
    deadline = time.monotonic() + (seconds or 120)
    counts: dict[str, int] = {}
    sent = 0
    while (sent < FRAMES or seconds) and time.monotonic() < deadline:
        node = cluster.brokers[sent % len(cluster.brokers)]
        outcome = _send(port(node), mutate(rng.choice(seeds), random_mutations(rng)))
        counts[outcome] = counts.get(outcome, 0) + 1
        sent += 1
    return counts


def _check_serving(cluster, topic: str) -> None:
    """Every node up, no handler crash logged, and acks=all records produced and read back."""
    for b in cluster.brokers:
        assert b.running, b.log_tail()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(20):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": topic,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
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
               if "after an unexpected error" in line or "level=ERROR" in line]
    assert crashes == [], crashes[:5]

