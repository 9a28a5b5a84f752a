"""A KRaft broker in a cluster of several: how it reaches the active controller.

- `ControllerChannel`: requests to whichever controller leads the quorum now (the Raft
  leader, from the metadata log), on its CONTROLLER listener; NOT_CONTROLLER or a lost
  connection means asking again once the quorum has (another) leader, until a deadline.
- `BrokerLifecycle`: BrokerRegistration once, then BrokerHeartbeat every
  ``broker.heartbeat.interval.ms`` (every 10 ms until first unfenced, as Kafka's broker) with
  how far this broker has replayed the metadata log;
  the controller unfences it once it has caught up, fences it when heartbeats stop, and
  answers "you may shut down" once a controlled shutdown moved its leaderships away. A broker
  whose registration the controller no longer knows (STALE_BROKER_EPOCH) registers again.
  When the controllers are all down the broker keeps serving on the metadata it has.
- `ForwardingController`: the `Controller` seam. On the node that leads the quorum it is the
  local `ClusterQuorumController`; elsewhere the few calls the broker itself makes become
  Kafka's inter-broker requests (AlterPartition, AllocateProducerIds, and CreateTopics in an
  Envelope for internal topics), and admin requests from clients never get here: the router
  forwards them whole (`AdminForwarder`).
- `AdminForwarder`: forwards a client's admin request in an Envelope with its principal, and
  on the active controller handles a forwarded one through the broker's own router.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from strom.broker.alter_partition import AlterPartitionBatcher, IsrChange
from strom.broker.context import RequestContext, RequestTimes, Throttle
from strom.cluster.client import BrokerClient, BrokerConnectionError
from strom.cluster.features import supported_ranges
from strom.cluster.image import BrokerInfo, MetadataImage, PartitionState, TopicState
from strom.cluster.quotas import QuotaEntity
from strom.cluster.reassignment import Assignment
from strom.controller.broker_apis import REGISTRY_LISTENER
from strom.controller.cluster_controller import ClusterQuorumController
from strom.controller.envelope import envelope_request
from strom.controller.loader import MetadataLoader
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import Struct, request_codec, response_codec
from strom.protocol.errors import ErrorCode, KafkaError
from strom.protocol.header import decode_request_header, decode_response_header
from strom.security.acl import AclBinding
from strom.security.client import ClientSecurity
from strom.security.principal import ANONYMOUS, KafkaPrincipal
from strom.security.session import Session

log = logging.getLogger("strom.broker.kraft")

REGISTRATION_VERSION = 4
HEARTBEAT_VERSION = 2
CREATE_TOPICS_VERSION = 7
# how long a forwarded admin request may wait for an active controller to answer it (an
# election, a controller restarting): the admin client's default request timeout
FORWARD_TIMEOUT_S = 30.0
# how long to wait before asking again when no controller answered (a back-off, not a wait
# for something to happen)
RETRY_BACKOFF_S = 0.1
# Admin APIs a broker forwards to the active controller, as Kafka's brokers do.
FORWARDED_APIS = frozenset({
    ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS,
    ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CLIENT_QUOTAS,
    ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.ELECT_LEADERS,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    ApiKey.UNREGISTER_BROKER, ApiKey.UPDATE_FEATURES, ApiKey.UNREGISTER_CONTROLLER,
})
# a stopping broker's heartbeats that went unanswered before it stops without the controller
UNANSWERED_SHUTDOWN_ASKS = 2
# Kafka's BrokerLifecycleManager: until the controller first unfences it, a starting broker
# heartbeats every 10 ms (so a broker with nothing to recover serves as soon as it has caught
# up, not a heartbeat interval later: 2 s by default); the first answer to a controlled
# shutdown that is not yet "you may stop" brings the next heartbeat after 50 ms.
STARTING_HEARTBEAT_S = 0.01
FIRST_SHUTDOWN_RETRY_S = 0.05
# a registration refused as a duplicate (another process of this broker id still heartbeats,
# or did until a moment ago: a restart after kill -9) is asked again after 100 ms, doubling up
# to the heartbeat interval
DUPLICATE_RETRY_FIRST_S = 0.1
PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


def registry_listener(url: str) -> dict[str, Any]:
    """Strom's own entry in a registration's listeners: where this broker's schema registry
    answers (the others forward registry writes to it), as the ZooKeeper registration's
    ``strom_schema_registry`` field (strom.controller.broker_apis reads it back)."""
    parsed = urlsplit(url)
    return {"name": REGISTRY_LISTENER, "host": parsed.hostname or "", "port": parsed.port or 0,
            "security_protocol": 1 if parsed.scheme == "https" else 0}


class ControllerChannel:
    """Requests to the active controller (see the module doc)."""

    def __init__(self, leader: Callable[[], int | None],
                 endpoints: Callable[[], Mapping[int, tuple[str, int]]], *, client_id: str,
                 security: ClientSecurity, timeout_s: float) -> None:
        self._leader = leader
        self._endpoints = endpoints
        self._client_id = client_id
        self._security = security
        self.timeout_s = timeout_s
        self._clients: dict[int, BrokerClient] = {}

    def _client(self, node_id: int) -> BrokerClient | None:
        address = self._endpoints().get(node_id)
        if address is None:
            return None
        client = self._clients.get(node_id)
        if client is None or (client.host, client.port) != address:
            if client is not None:
                client.close()
            client = self._clients[node_id] = BrokerClient(
                address[0], address[1], client_id=self._client_id, timeout_s=self.timeout_s,
                security=self._security)
        return client

    async def request(self, api_key: ApiKey, version: int, body: Mapping[str, Any], *,
                      timeout_s: float | None = None) -> Struct:
        """The active controller's response; NOT_CONTROLLER answers and lost connections are
        retried until `timeout_s` (then KafkaError REQUEST_TIMED_OUT)."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        last = "no controller is known"
        while True:
            leader = self._leader()
            client = self._client(leader) if leader is not None else None
            if client is not None:
                try:
                    response = await client.request(
                        api_key, version, body,
                        timeout_s=max(0.1, min(self.timeout_s, deadline - time.monotonic())))
                except BrokerConnectionError as exc:
                    last = str(exc)
                else:
                    if getattr(response, "error_code", 0) != ErrorCode.NOT_CONTROLLER:
                        return response
                    last = f"node {leader} is no longer the active controller"
            if time.monotonic() >= deadline:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                                 f"no answer from the active controller to "
                                 f"{ApiKey(api_key).name}: {last}")
            await asyncio.sleep(RETRY_BACKOFF_S)

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()


class BrokerLifecycle:
    """Registration and heartbeats (see the module doc)."""

    def __init__(self, channel: ControllerChannel, info: BrokerInfo, cluster_id: str,
                 protocols: Mapping[str, str], loader: MetadataLoader, *,
                 interval_ms: int, session_timeout_ms: int,
                 register_by: float = float("inf"),
                 log_dirs: Sequence[uuid.UUID] = (),
                 offline_dirs: Callable[[], list[uuid.UUID]] = list,
                 incarnation: uuid.UUID | None = None) -> None:
        self.channel = channel
        self.session_s = session_timeout_ms / 1000
        self._last_answer = float("-inf")  # monotonic time of the last heartbeat answered
        self.info = info
        self.cluster_id = cluster_id
        self.protocols = dict(protocols)
        self.loader = loader
        self.interval_s = interval_ms / 1000
        self.incarnation = incarnation or uuid.uuid4()  # this process's
        self.log_dirs = list(log_dirs)  # the directory ids of its log dirs (KIP-858)
        self.offline_dirs = offline_dirs  # those offline now (a failed or full disk)
        self.epoch = -1
        self.fenced = True
        self.want_shut_down = False
        self._may_shut_down = asyncio.Event()
        # asked to shut down, but no controller answers (a quorum stopping with this node)
        self._unanswered = asyncio.Event()
        self._failures_since_asked = 0
        self._shutdown_answers = 0  # answers to the controlled shutdown that said "not yet"
        self._answered = False  # whether the controller answered the last heartbeat
        self._unfenced = asyncio.Event()
        self._wake = asyncio.Event()
        self._duplicate_retry_s = 0.0  # the wait after a refusal as a duplicate; 0: none
        # initial.broker.registration.timeout.ms: the monotonic time by which the first
        # registration must have been accepted; after that the broker gives up and exits
        self.register_by = register_by
        self.registered = False
        self.gave_up = asyncio.Event()
        self.gave_up_reason = ""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="broker-lifecycle")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.channel.close()

    def _listeners(self) -> list[dict[str, Any]]:
        ordered = sorted(self.info.endpoints.items(),
                         key=lambda kv: (kv[1] != (self.info.host, self.info.port), kv[0]))
        out = [{"name": name, "host": host, "port": port,
                "security_protocol": PROTOCOL_IDS.get(self.protocols.get(name, ""), 0)}
               for name, (host, port) in ordered]
        if self.info.registry_url is not None:
            out.append(registry_listener(self.info.registry_url))
        return out

    async def _register(self) -> None:
        response = await self.channel.request(ApiKey.BROKER_REGISTRATION, REGISTRATION_VERSION, {
            "broker_id": self.info.broker_id, "cluster_id": self.cluster_id,
            "incarnation_id": self.incarnation, "listeners": self._listeners(),
            "features": [{"name": name, "min_supported_version": lo,
                          "max_supported_version": hi}
                         for name, (lo, hi) in sorted(supported_ranges().items())],
            "rack": self.info.rack, "is_migrating_zk_broker": False,
            "log_dirs": self.log_dirs, "previous_broker_epoch": -1})
        if response.error_code != ErrorCode.NONE:
            raise KafkaError(ErrorCode(response.error_code),
                             f"the controller refused the registration of broker "
                             f"{self.info.broker_id}")
        self.epoch = int(response.broker_epoch)
        self.registered = True
        log.info("broker %d registered with the controller (broker epoch %d)",
                 self.info.broker_id, self.epoch)

    async def _heartbeat(self) -> None:
        response = await self.channel.request(ApiKey.BROKER_HEARTBEAT, HEARTBEAT_VERSION, {
            "broker_id": self.info.broker_id, "broker_epoch": self.epoch,
            "current_metadata_offset": self.loader.applied_offset - 1, "want_fence": False,
            "want_shut_down": self.want_shut_down, "offline_log_dirs": self.offline_dirs(),
            "cordoned_log_dirs": None}, timeout_s=max(self.interval_s, 1.0))
        if response.error_code in (ErrorCode.STALE_BROKER_EPOCH,
                                   ErrorCode.BROKER_ID_NOT_REGISTERED):
            log.warning("the controller does not know broker %d's registration (epoch %d): "
                        "registering again", self.info.broker_id, self.epoch)
            self.epoch = -1
            return
        if response.error_code != ErrorCode.NONE:
            log.info("heartbeat refused: %s", ErrorCode(response.error_code).name)
            return
        self._last_answer = time.monotonic()
        self._answered = True
        if self.fenced != bool(response.is_fenced):
            log.info("broker %d is %s", self.info.broker_id,
                     "fenced" if response.is_fenced else "unfenced")
        self.fenced = bool(response.is_fenced)
        if not self.fenced:
            self._unfenced.set()
        if response.should_shut_down:
            self._may_shut_down.set()
        elif self.want_shut_down:
            self._shutdown_answers += 1

    async def _run(self) -> None:
        while True:
            self._answered = False
            try:
                if self.epoch < 0:
                    await self._register()
                    self._duplicate_retry_s = 0.0
                await self._heartbeat()
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:  # no controller answers: keep serving, ask again
                if exc.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION:
                    self._duplicate_retry_s = min(self.interval_s, max(
                        DUPLICATE_RETRY_FIRST_S, 2 * self._duplicate_retry_s))
                    log.warning("the controller refused broker %d's registration "
                                "(DUPLICATE_BROKER_REGISTRATION): another process with this "
                                "node.id is registered and sends heartbeats, or did a moment "
                                "ago (a restart after kill -9 waits for two heartbeats it "
                                "misses); asking again in %.1f s", self.info.broker_id,
                                self._duplicate_retry_s)
                else:
                    log.info("controller unreachable: %s", exc.message)
                if self.want_shut_down:
                    self._failures_since_asked += 1
                    if self._failures_since_asked >= UNANSWERED_SHUTDOWN_ASKS:
                        self._unanswered.set()
            except Exception:
                log.exception("broker heartbeat failed")
            if not self.registered and time.monotonic() > self.register_by:
                self.gave_up_reason = (
                    f"broker {self.info.broker_id} could not register with the controller "
                    f"quorum within initial.broker.registration.timeout.ms (see the log above)")
                log.error("%s: exiting", self.gave_up_reason)
                self.gave_up.set()
                return
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._next_heartbeat_s())

    def _next_heartbeat_s(self) -> float:
        """The wait before the next heartbeat, as Kafka's broker times it (see
        STARTING_HEARTBEAT_S); after an error or no answer, the interval."""
        if self._duplicate_retry_s and self.epoch < 0:
            return self._duplicate_retry_s
        if not self._answered:
            return self.interval_s
        if not self._unfenced.is_set() and not self.want_shut_down:
            return STARTING_HEARTBEAT_S
        if self.want_shut_down and self._shutdown_answers == 1:
            return FIRST_SHUTDOWN_RETRY_S
        return self.interval_s

    def current(self) -> bool:
        """Whether this broker's metadata can be trusted to answer for a leadership: the
        controller answered a heartbeat within the session timeout (a broker cut off from the
        controllers longer than that may have been fenced, its leaderships moved)."""
        return time.monotonic() - self._last_answer < self.session_s

    async def wait_unfenced(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._unfenced.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask the controller to move this broker's leaderships away: True once it said this
        broker may stop."""
        if self.epoch < 0:
            return True
        self.want_shut_down = True
        self._wake.set()
        answered = asyncio.ensure_future(self._may_shut_down.wait())
        gone = asyncio.ensure_future(self._unanswered.wait())
        try:
            await asyncio.wait({answered, gone}, timeout=timeout_s,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            answered.cancel()
            gone.cancel()
        if self._unanswered.is_set() and not self._may_shut_down.is_set():
            log.warning("controlled shutdown: no controller answers (the quorum is stopping "
                        "too, or unreachable); stopping without moving leaderships")
        return self._may_shut_down.is_set()


class ForwardingController:
    """The `Controller` of a broker in a KRaft cluster (see the module doc)."""

    immediate = False
    single_broker = False

    def __init__(self, local: ClusterQuorumController | None, loader: MetadataLoader,
                 channel: ControllerChannel, lifecycle: BrokerLifecycle,
                 forwarder: AdminForwarder) -> None:
        self.image: MetadataImage = loader.image
        self._local = local
        self._loader = loader
        self._channel = channel
        self._lifecycle = lifecycle
        self._forwarder = forwarder
        self._isr_changes = AlterPartitionBatcher(channel.request, lifecycle.info.broker_id,
                                                  lambda: lifecycle.epoch, self._active)

    @property
    def leader_elections(self) -> int:
        return self._local.leader_elections if self._local is not None else 0

    @property
    def unclean_leader_elections(self) -> int:
        return self._local.unclean_leader_elections if self._local is not None else 0

    def _active(self) -> ClusterQuorumController | None:
        return self._local if self._local is not None and self._local.active else None

    def _required(self) -> ClusterQuorumController:
        local = self._active()
        if local is None:  # admin requests are forwarded before they reach a handler
            raise KafkaError(ErrorCode.NOT_CONTROLLER,
                             "this broker is not the active controller; ask again")
        return local

    def subscribe(self, listener: Callable[[list[Any]], None]) -> None:
        self._loader.subscribe(listener)

    async def wait_until(self, predicate: Callable[[MetadataImage], bool],
                         timeout_s: float) -> bool:
        return await self._loader.wait_for(lambda: predicate(self.image), timeout_s)

    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           assignments: Mapping[int, list[int]] | None,
                           configs: Mapping[str, str], *,
                           validate_only: bool = False) -> TopicState:
        local = self._active()
        if local is not None:
            return await local.create_topic(name, num_partitions, replication_factor,
                                            assignments, configs, validate_only=validate_only)
        body = {"topics": [{
            "name": name, "num_partitions": num_partitions if not assignments else -1,
            "replication_factor": replication_factor if not assignments else -1,
            "assignments": [{"partition_index": p, "broker_ids": list(r)}
                            for p, r in sorted((assignments or {}).items())],
            "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
            "timeout_ms": int(self._channel.timeout_s * 1000), "validate_only": validate_only}
        response = await self._forwarder.forward_body(ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION,
                                                      body, ANONYMOUS, "127.0.0.1")
        result = response.topics[0]
        if result.error_code != ErrorCode.NONE:
            raise KafkaError(ErrorCode(result.error_code), result.error_message or name)
        if validate_only:
            return TopicState(name, result.topic_id or uuid.UUID(int=0))
        if not await self.wait_until(lambda image: name in image.topics, self._channel.timeout_s):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                             f"topic {name} was created but is not in this broker's metadata yet")
        return self.image.topics[name]

    async def update_features(self, levels: Mapping[str, int], *, validate_only: bool) -> None:
        """Forwarded here (FORWARDED_APIS) before a handler runs: only the active one acts."""
        await self._required().update_features(levels, validate_only=validate_only)

    async def allocate_producer_ids(self, broker_id: int) -> tuple[int, int]:
        local = self._active()
        if local is not None:
            return await local.allocate_producer_ids(broker_id)
        response = await self._channel.request(ApiKey.ALLOCATE_PRODUCER_IDS, 0, {
            "broker_id": broker_id, "broker_epoch": self._lifecycle.epoch})
        if response.error_code != ErrorCode.NONE:
            raise KafkaError(ErrorCode(response.error_code), "no producer ids from the controller")
        return int(response.producer_id_start), int(response.producer_id_len)

    async def alter_isr(self, topic: str, partition: int, leader_epoch: int,
                        partition_epoch: int, isr: list[int]) -> PartitionState:
        t = self.image.topics.get(topic)
        if t is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition}")
        state = t.partitions.get(partition)
        return await self._isr_changes.submit(IsrChange(
            t.topic_id, topic, partition, leader_epoch, partition_epoch, tuple(isr),
            tuple(state.replicas) if state is not None else tuple(isr)))

    # -- admin operations: only ever on the active controller -------------------------------

    async def delete_topic(self, topic: TopicState) -> None:
        await self._required().delete_topic(topic)

    async def create_partitions(self, topic: TopicState, total: int,
                                assignments: list[list[int]] | None, *,
                                validate_only: bool = False) -> None:
        await self._required().create_partitions(topic, total, assignments,
                                                 validate_only=validate_only)

    async def alter_configs(self, resource: str, name: str,
                            changes: Mapping[str, str | None]) -> None:
        await self._required().alter_configs(resource, name, changes)

    async def alter_client_quotas(
            self, changes: Mapping[QuotaEntity, Mapping[str, float | None]]) -> None:
        await self._required().alter_client_quotas(changes)

    async def alter_acls(self, create: Sequence[AclBinding], delete: Sequence[AclBinding]) -> None:
        await self._required().alter_acls(create, delete)

    async def elect_leaders(self, election_type: int,
                            partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], int]:
        return await self._required().elect_leaders(election_type, partitions)

    async def alter_partition_reassignments(
        self, wanted: Mapping[tuple[str, int], list[int] | None], allow_rf_change: bool,
    ) -> dict[tuple[str, int], tuple[int, str | None, Assignment | None]]:
        return await self._required().alter_partition_reassignments(wanted, allow_rf_change)

    async def unregister_broker(self, broker_id: int) -> None:
        await self._required().unregister_broker(broker_id)

    async def unregister_controller(self, controller_id: int) -> None:
        await self._required().unregister_controller(controller_id)


class _ForwardedConnection:
    """The connection a forwarded request is handled on: its client's principal and address."""

    def __init__(self, listener: str, protocol: str, principal: KafkaPrincipal,
                 host: str) -> None:
        self.cid = -1
        self.session: Session | None = Session(listener, protocol, f"{host}:0", principal)
        self.session.forwarded = True
        self.throttle = Throttle()
        self.on_close: list[Callable[[], None]] = []
        self.times: RequestTimes | None = None
        self.peer = f"{host}:0"


Dispatch = Callable[[Any, int, int, int, bytearray], Any]


class AdminForwarder:
    """Admin requests to the active controller, and forwarded ones handled here."""

    apis = frozenset(int(k) for k in FORWARDED_APIS)

    def __init__(self, channel: ControllerChannel, is_active: Callable[[], bool],
                 listener: str, protocol: str) -> None:
        self.channel = channel
        self.is_active = is_active
        self.listener = listener  # the broker listener forwarded requests are handled as on
        self.protocol = protocol
        self.dispatch: Dispatch | None = None  # the broker router's, set once it exists
        self.response_header: Callable[[int, int, int], bytes] | None = None

    def forward(self, ctx: RequestContext, body: memoryview) -> Awaitable[bytes] | None:
        """None when this node leads (the request is handled here), else the reply body the
        active controller gave."""
        if self.is_active():
            return None
        return self._forward(ctx.api_key, ctx.api_version, ctx.correlation_id, ctx.client_id,
                             bytes(body), ctx.principal, ctx.peer)

    async def _forward(self, api_key: int, version: int, correlation_id: int,
                       client_id: str | None, body: bytes, principal: KafkaPrincipal,
                       peer: str) -> bytes:
        request = envelope_request(api_key, version, correlation_id, client_id, body,
                                   principal, peer)
        response = await self.channel.request(
            ApiKey.ENVELOPE, 0, request, timeout_s=max(self.channel.timeout_s, FORWARD_TIMEOUT_S))
        if response.error_code != ErrorCode.NONE or response.response_data is None:
            raise KafkaError(ErrorCode(response.error_code),
                             f"the controller refused the forwarded {ApiKey(api_key).name}")
        data = bytes(response.response_data)
        codec = response_codec(api_key, version)
        _, pos = decode_response_header(data, 0, codec.header_version)
        return data[pos:]

    async def forward_body(self, api_key: ApiKey, version: int, body: Mapping[str, Any],
                           principal: KafkaPrincipal, peer: str) -> Struct:
        """A request of this broker's own, forwarded like a client's: the decoded response."""
        encoded = request_codec(api_key, version).encode(body)
        reply = await self._forward(api_key, version, 0, "strom-broker", encoded, principal, peer)
        value, _ = response_codec(api_key, version).decode(memoryview(reply))
        return value

    async def handle(self, principal: KafkaPrincipal, host: str, data: bytes) -> bytes:
        """A forwarded request (header and body), handled by this broker's router as if its
        client had sent it here: the response, header and body."""
        assert self.dispatch is not None and self.response_header is not None
        frame = bytearray(data)
        header, _ = decode_request_header(memoryview(frame), 0)
        conn = _ForwardedConnection(self.listener, self.protocol, principal, host)
        reply = self.dispatch(conn, header.api_key, header.api_version,
                              header.correlation_id, frame)
        if isinstance(reply, Awaitable):
            reply = await reply
        body = bytes(reply) if reply is not None else b""
        return self.response_header(header.api_key, header.api_version,
                                    header.correlation_id) + body
