"""The CONTROLLER listener's broker-facing APIs answer bad input with Kafka's error codes and
change nothing: another cluster's registration (INCONSISTENT_CLUSTER_ID), a node that does
not lead the quorum (NOT_CONTROLLER), an unknown broker's heartbeat (BROKER_ID_NOT_REGISTERED),
a stale broker epoch (STALE_BROKER_EPOCH), an Envelope whose principal cannot be read
(PRINCIPAL_DESERIALIZATION_FAILURE); a registration's schema-registry entry is not a
listener."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from strom.cluster.image import MetadataImage
from strom.controller import broker_apis
from strom.controller.cluster_controller import ClusterQuorumController
from strom.controller.envelope import decode_principal, encode_principal
from strom.controller.loader import MetadataLoader
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import request_codec
from strom.protocol.errors import ErrorCode
from strom.security.principal import KafkaPrincipal

from .test_quorum_controller import FakeQuorum


def run(factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(factory(), 10))


class Node:
    authorizer = None  # no ACLs: everything allowed (test_controller_authz checks them)

    def __init__(self) -> None:
        self.cluster_id = "the-cluster"
        self.loader = MetadataLoader(MetadataImage(cluster_id="the-cluster"),
                                     asyncio.get_running_loop())
        self.quorum = FakeQuorum(self.loader)
        self.leading = True
        self.cluster: ClusterQuorumController | None = ClusterQuorumController(
            self.loader, self.quorum.append, node_id=1, is_leader=lambda: self.leading,
            session_timeout_ms=60_000, unclean_for=lambda _t: False)
        self.forwarded = None


def decoded(api_key: ApiKey, version: int, body: dict[str, Any]) -> Any:
    codec = request_codec(api_key, version)
    value, _ = codec.decode(memoryview(codec.encode(body)))
    return value


class Ctx:
    api_version = 4


def registration(broker_id: int, cluster_id: str = "the-cluster") -> Any:
    return decoded(ApiKey.BROKER_REGISTRATION, 4, {
        "broker_id": broker_id, "cluster_id": cluster_id, "incarnation_id": uuid.uuid4(),
        "listeners": [
            {"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9092, "security_protocol": 0},
            {"name": broker_apis.REGISTRY_LISTENER, "host": "127.0.0.1", "port": 8081,
             "security_protocol": 0}],
        "features": [], "rack": None, "is_migrating_zk_broker": False, "log_dirs": [],
        "previous_broker_epoch": -1})


def heartbeat(broker_id: int, epoch: int) -> Any:
    return decoded(ApiKey.BROKER_HEARTBEAT, 2, {
        "broker_id": broker_id, "broker_epoch": epoch, "current_metadata_offset": 100,
        "want_fence": False, "want_shut_down": False, "offline_log_dirs": [],
        "cordoned_log_dirs": None})


def test_registrations_and_heartbeats_with_bad_input_change_nothing() -> None:
    async def main() -> None:
        node = Node()
        other = await broker_apis.broker_registration(node, Ctx(), registration(2, "another"))
        assert other["error_code"] == ErrorCode.INCONSISTENT_CLUSTER_ID
        unknown = await broker_apis.broker_heartbeat(node, Ctx(), heartbeat(2, 5))
        assert unknown["error_code"] == ErrorCode.BROKER_ID_NOT_REGISTERED
        assert node.quorum.appended == []

        ok = await broker_apis.broker_registration(node, Ctx(), registration(2))
        assert ok["error_code"] == ErrorCode.NONE
        info = node.loader.image.registrations[2].info
        assert set(info.endpoints) == {"PLAINTEXT"}  # the registry is not a listener
        assert info.registry_url == "http://127.0.0.1:8081"
        stale = await broker_apis.broker_heartbeat(node, Ctx(), heartbeat(2, ok["broker_epoch"] - 1))
        assert stale["error_code"] == ErrorCode.STALE_BROKER_EPOCH
        # v0 has no offline log dirs (found by the CONTROLLER listener's fuzz test)
        v0 = await broker_apis.broker_heartbeat(node, Ctx(), decoded(ApiKey.BROKER_HEARTBEAT, 0, {
            "broker_id": 2, "broker_epoch": ok["broker_epoch"], "current_metadata_offset": 100,
            "want_fence": False, "want_shut_down": False}))
        assert v0["error_code"] == ErrorCode.NONE

        node.leading = False
        before = list(node.quorum.appended)
        elsewhere = await broker_apis.broker_registration(node, Ctx(), registration(3))
        assert elsewhere["error_code"] == ErrorCode.NOT_CONTROLLER
        ids = await broker_apis.allocate_producer_ids(node, Ctx(), decoded(
            ApiKey.ALLOCATE_PRODUCER_IDS, 0, {"broker_id": 2, "broker_epoch": ok["broker_epoch"]}))
        assert ids["error_code"] == ErrorCode.NOT_CONTROLLER
        assert node.quorum.appended == before

    run(main)


def test_an_envelope_whose_principal_cannot_be_read_is_refused() -> None:
    async def main() -> None:
        node = Node()
        called = []

        async def forwarded(principal: KafkaPrincipal, host: str, data: bytes) -> bytes:
            called.append(principal)
            return b""

        node.forwarded = forwarded  # type: ignore[assignment]
        bad = decoded(ApiKey.ENVELOPE, 0, {"request_data": b"\x00\x13", "request_principal":
                                           b"\x00\x07garbage", "client_host_address": b"\x7f\0\0\1"})
        answer = await broker_apis.envelope(node, Ctx(), bad)
        assert answer["error_code"] == ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE
        # found by the CONTROLLER listener's fuzz test: no principal at all, a cut-off one
        for principal in (b"", b"\x00", b"\x00\x00\x05"):
            empty = decoded(ApiKey.ENVELOPE, 0, {"request_data": b"\x00\x13",
                                                 "request_principal": principal,
                                                 "client_host_address": b"\x7f\0\0\1"})
            refused = await broker_apis.envelope(node, Ctx(), empty)
            assert refused["error_code"] == ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE, principal
        assert called == []
        alice = KafkaPrincipal("User", "alice")
        assert decode_principal(encode_principal(alice)) == alice

    run(main)
