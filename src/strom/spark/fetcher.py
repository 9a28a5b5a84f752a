"""Executor side, native path: read one offset range with Strom's own Kafka client, straight
into Arrow buffers.

Why not librdkafka here: confluent-kafka hands over one Python ``Message`` per record, and
that object (with librdkafka's own per-message work) cost more CPU per record than all of
Spark's Kafka connector does (docs/benchmarks.md). This path sends Fetch requests itself and
decodes each partition's record batches in C (``strom.record.columns``): no Python object per
record.

It reads what a Kafka consumer reads: the partition's leader from Metadata (topic ids, leader
epochs, so a stale leader or a re-created topic is noticed), ``read_uncommitted`` or
``read_committed`` (aborted transactions skipped per batch, by the Java consumer's rule), CRCs
checked as the Java consumer does by default (``check.crcs``), TLS and SASL PLAIN/SCRAM from the
Java client's settings. Settings it does not implement make the source use the librdkafka path
instead (:func:`strom.spark.options.native_reader_unsupported`); nothing is silently ignored.

The data-loss rules are the librdkafka path's (strom.spark.consumer), fed by the watermarks
every Fetch response carries.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from strom.cluster.client import BrokerClient, BrokerConnectionError
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.record.columns import decode_columns
from strom.record.errors import CorruptRecordError
from strom.security.client import (
    PLAINTEXT,
    ClientAuthenticationError,
    ClientSecurity,
    SaslCredentials,
)
from strom.spark.arrow import columns_to_batch
from strom.spark.offsets import OffsetRange
from strom.spark.progress import ProgressDeadline

log = logging.getLogger("strom.spark")

METADATA_VERSION = 12
FETCH_VERSION = 13  # topic ids: a topic deleted and re-created is not read as the old one
LIST_OFFSETS_VERSION = 7
SESSIONS_MAX = 4  # clients kept by one Python worker process, one per distinct kafka.* config
RETRY_BACKOFF_S = 0.1
SHORT_GRACE_S = 10.0  # a partition ending before a planned range must stay so this long
GONE_CHECKS = 3  # metadata answers in a row that must miss a partition before it is gone
_FIRST_OFFSET = struct.Struct("=q")  # the decoder's columns are in native byte order

DEFAULT_MAX_WAIT_MS = 100  # (Java: 500) a task waits for data only at a range's very end
DEFAULT_PARTITION_MAX_BYTES = 8 << 20  # (Java: 1 MiB) fewer, larger fetches cost less CPU

# connection failures that waiting does not cure: wrong credentials, an untrusted certificate
_FATAL = (ClientAuthenticationError, ssl.SSLCertVerificationError)
_GONE = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID})
_DENIED = frozenset({ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                     ErrorCode.SASL_AUTHENTICATION_FAILED})


class ReadRefused(RuntimeError):
    """The brokers refuse this reader (credentials, certificate, ACLs): waiting cures nothing,
    so the task fails at once."""


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def _security(params: Mapping[str, str]) -> ClientSecurity:
    from strom.security.jaas import single_module
    from strom.security.tls import client_context

    protocol = params.get("security.protocol", "PLAINTEXT").upper()
    if protocol == "PLAINTEXT":
        return PLAINTEXT
    context = None
    if protocol.endswith("SSL"):
        def get(name: str) -> Any:
            if name == "ssl.endpoint.identification.algorithm":  # the Java client's default
                return params.get(name, "https") or None
            value = params.get(name)
            if value is not None and name in ("ssl.enabled.protocols", "ssl.cipher.suites"):
                return [v.strip() for v in value.split(",") if v.strip()]
            return value

        context = client_context(get)
    credentials = None
    if protocol.startswith("SASL"):
        mechanism = params.get("sasl.mechanism", "GSSAPI").upper()
        jaas = params.get("sasl.jaas.config")
        options = single_module(jaas, "kafka.sasl.jaas.config").options if jaas else {}
        if not options.get("username") or "password" not in options:
            raise ValueError("kafka.sasl.jaas.config needs username=\"...\" password=\"...\"")
        credentials = SaslCredentials(mechanism, options["username"], options["password"])
    return ClientSecurity(context, credentials)


def _bootstrap(text: str) -> list[tuple[str, int]]:
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        host, _, port = item.rpartition(":")
        out.append((host.strip("[]") or "localhost", int(port)))
    return out


@dataclass
class _Leader:
    node: int
    epoch: int


class Session:
    """One worker process's client for one ``kafka.*`` configuration: an event loop of its
    own, a connection per broker, and the leaders and topic ids it has learnt."""

    def __init__(self, params: Mapping[str, str]) -> None:
        self.params = dict(params)
        self.loop = asyncio.new_event_loop()
        self.security = _security(params)
        self.client_id = params.get("client.id", "strom-spark-source")
        self.timeout_s = int(params.get("request.timeout.ms", 30_000)) / 1000
        self.bootstrap = _bootstrap(params["bootstrap.servers"])
        self.brokers: dict[int, tuple[str, int]] = {}
        self.clients: dict[tuple[str, int], BrokerClient] = {}
        self.leaders: dict[tuple[str, int], _Leader] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def _client(self, address: tuple[str, int]) -> BrokerClient:
        c = self.clients.get(address)
        if c is None:
            c = self.clients[address] = BrokerClient(
                address[0], address[1], client_id=self.client_id, timeout_s=self.timeout_s,
                security=self.security)
        return c

    async def refresh(self, topic: str) -> None:
        """Leaders and the topic id of ``topic`` from the first broker that answers."""
        last: Exception | None = None
        for address in [*self.brokers.values(), *self.bootstrap]:
            try:
                meta = await self._client(address).request(ApiKey.METADATA, METADATA_VERSION, {
                    "topics": [{"name": topic}], "allow_auto_topic_creation": False})
            except BrokerConnectionError as e:
                if isinstance(e.__cause__, _FATAL):
                    raise
                last = e
                continue
            self.brokers = {b.node_id: (b.host, b.port) for b in meta.brokers}
            for t in meta.topics:
                if t.name != topic:
                    continue
                if t.error_code == ErrorCode.NONE:
                    self.topic_ids[topic] = t.topic_id
                    for p in t.partitions:
                        self.leaders[(topic, p.partition_index)] = _Leader(p.leader_id,
                                                                           p.leader_epoch)
                elif t.error_code in _GONE:
                    self.topic_ids.pop(topic, None)
                    for key in [k for k in self.leaders if k[0] == topic]:
                        del self.leaders[key]
                elif t.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                    raise ReadRefused(f"not authorized to read topic {topic} "
                                      "(TOPIC_AUTHORIZATION_FAILED)")
            return
        raise BrokerConnectionError(f"no bootstrap server answers ({last})")

    def leader_client(self, topic: str, partition: int) -> tuple[BrokerClient, _Leader] | None:
        leader = self.leaders.get((topic, partition))
        if leader is None or leader.node < 0 or leader.node not in self.brokers:
            return None
        return self._client(self.brokers[leader.node]), leader

    def close(self) -> None:
        for c in self.clients.values():
            c.close()
        self.clients.clear()
        try:
            self.loop.run_until_complete(asyncio.sleep(0))  # let the transports close
        finally:
            self.loop.close()


_SESSIONS: list[tuple[tuple[tuple[str, str], ...], Session]] = []


def session_for(params: tuple[tuple[str, str], ...]) -> Session:
    for i, (key, s) in enumerate(_SESSIONS):
        if key == params:
            _SESSIONS.append(_SESSIONS.pop(i))
            return s
    s = Session(dict(params))
    _SESSIONS.append((params, s))
    while len(_SESSIONS) > SESSIONS_MAX:
        _SESSIONS.pop(0)[1].close()
    return s


def close_sessions() -> None:
    while _SESSIONS:
        _SESSIONS.pop()[1].close()


class NativeRangeFetch:
    """The records of one range, fetched from the partition's leader, as Arrow batches."""

    def __init__(self, session: Session, r: OffsetRange, settings: Any,
                 report_data_loss: Any) -> None:
        p = session.params
        self.s = session
        self.r = r
        self.settings = settings
        self.report = report_data_loss
        self.committed = p.get("isolation.level", "read_uncommitted").lower() == "read_committed"
        self.check_crcs = p.get("check.crcs", "true").lower() == "true"
        self.max_wait_ms = int(p.get("fetch.max.wait.ms", DEFAULT_MAX_WAIT_MS))
        self.min_bytes = int(p.get("fetch.min.bytes", 1))
        self.max_bytes = int(p.get("fetch.max.bytes", 50 << 20))
        self.partition_max_bytes = int(p.get("max.partition.fetch.bytes",
                                             DEFAULT_PARTITION_MAX_BYTES))
        self.pos = r.start
        self.topic_id: uuid.UUID | None = None  # the one this read started on
        self._short_since: float | None = None  # see _short_for_long
        self._short_end = -1

    @property
    def label(self) -> str:
        return f"{self.r.topic}-{self.r.partition}"

    def batches(self) -> Iterator[pa.RecordBatch]:
        r, s = self.r, self.settings
        progress = ProgressDeadline(r, s.poll_timeout_ms, self.label)
        while self.pos < r.end:
            before = self.pos
            try:
                batch = self.s.run(self._fetch_once())
            except BrokerConnectionError as e:
                if isinstance(e.__cause__, _FATAL):
                    raise ReadRefused(f"reading {self.label}: {e}") from e
                log.debug("reading %s at offset %d: %s", self.label, self.pos, e)
                batch = None
                self.s.leaders.pop((r.topic, r.partition), None)
                time.sleep(RETRY_BACKOFF_S)
            if batch is not None:
                rows = s.batch_rows
                for i in range(0, batch.num_rows, rows):
                    yield batch.slice(i, rows)
            progress.check(before, self.pos)

    async def _leader(self) -> tuple[BrokerClient, _Leader] | None:
        r = self.r
        found = self.s.leader_client(r.topic, r.partition)
        if found is None:
            await self.s.refresh(r.topic)
            found = self.s.leader_client(r.topic, r.partition)
            if found is None and await self._confirmed_gone():
                self._gone("the topic or partition does not exist")
        return found

    async def _confirmed_gone(self) -> bool:
        """True when the partition is missing from metadata GONE_CHECKS times in a row: a
        broker that has not caught up with a new topic yet is not a deleted topic."""
        r = self.r
        for _ in range(GONE_CHECKS):
            if r.topic in self.s.topic_ids and (r.topic, r.partition) in self.s.leaders:
                return False
            await asyncio.sleep(RETRY_BACKOFF_S)
            await self.s.refresh(r.topic)
        return r.topic not in self.s.topic_ids or (r.topic, r.partition) not in self.s.leaders

    def _gone(self, why: str) -> None:
        r = self.r
        self.report(f"{self.label} is gone ({why}); records in [{self.pos}, {r.end}) cannot "
                    "be read", self.settings.fail_on_data_loss)
        self.pos = r.end

    async def _fetch_once(self) -> pa.RecordBatch | None:
        r = self.r
        found = await self._leader()
        if found is None:
            if self.pos < r.end:
                await asyncio.sleep(RETRY_BACKOFF_S)  # no leader at the moment
            return None
        client, leader = found
        topic_id = self.s.topic_ids[r.topic]
        if self.topic_id is None:
            self.topic_id = topic_id
        elif topic_id != self.topic_id:
            self._gone("deleted and re-created: it has a new topic id")
            return None
        response = await client.request(ApiKey.FETCH, FETCH_VERSION, {
            "replica_id": -1, "max_wait": self.max_wait_ms, "min_bytes": self.min_bytes,
            "max_bytes": self.max_bytes, "isolation_level": 1 if self.committed else 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic_id": topic_id, "partitions": [{
                "partition": r.partition, "current_leader_epoch": leader.epoch,
                "fetch_offset": self.pos, "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": self.partition_max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": "",
        }, timeout_s=self.s.timeout_s + self.max_wait_ms / 1000)
        code = response.error_code
        part = None
        for t in response.responses:
            for p in t.partitions:
                if p.partition_index == r.partition:
                    part = p
                    code = code or p.error_code
        if code == ErrorCode.NONE and part is not None:
            batch = self._records(part)
            if batch is None and self._short_since is not None:
                await asyncio.sleep(RETRY_BACKOFF_S)  # waiting out a lagging high watermark
            return batch
        await self._on_error(code)
        return None

    def _records(self, part: Any) -> pa.RecordBatch | None:
        r, s = self.r, self.settings
        records = part.records
        aborted = None
        if self.committed and part.aborted_transactions:
            aborted = [(a.producer_id, a.first_offset) for a in part.aborted_transactions]
        cols = None
        if records is not None and len(records):
            try:
                cols = decode_columns(records, self.pos, r.end, headers=s.include_headers,
                                      aborted=aborted, check_crcs=self.check_crcs)
            except CorruptRecordError as e:
                raise RuntimeError(f"Record batch for partition {self.label} at offset "
                                   f"{self.pos} is invalid: {e}") from e
        if cols is None or cols.next_offset < 0:
            # nothing complete: at the end of what the leader offers, or one batch too big
            end_of_log = part.last_stable_offset if self.committed else part.high_watermark
            if self.pos >= end_of_log and part.high_watermark < r.end:
                if self._short_for_long(part.high_watermark):
                    self.report(f"Cannot fetch records in [{self.pos}, {r.end}) of "
                                f"{self.label}: the partition now ends at offset "
                                f"{part.high_watermark}", s.fail_on_data_loss)
                    self.pos = r.end
            elif records is not None and len(records) >= self.partition_max_bytes:
                self.partition_max_bytes *= 2  # (brokers send a first batch whole anyway)
            return None
        if cols.rows:
            (first,) = _FIRST_OFFSET.unpack_from(cols.offsets)
            if first > self.pos and part.log_start_offset > self.pos:
                self._lost_before(part.log_start_offset, first)
        elif cols.next_offset > self.pos and part.log_start_offset > self.pos:
            self._lost_before(part.log_start_offset, cols.next_offset)
        self.pos = max(self.pos, min(cols.next_offset, r.end))
        self._short_since = None
        if not cols.rows:
            return None
        return columns_to_batch(cols, r.topic, r.partition, s.include_headers)

    def _short_for_long(self, end: int) -> bool:
        """True once the partition has ended (at ``end``) before the range for SHORT_GRACE_S.

        A leader elected a moment ago can report a high watermark below the one the range was
        planned from (it learns the last one from its followers' next fetches) although it
        holds every acknowledged record; only a shortfall that lasts is lost data (an unclean
        election, a topic re-created smaller). Until then the read retries."""
        now = time.monotonic()
        if self._short_since is None or end != self._short_end:
            self._short_since, self._short_end = now, end
        grace = min(SHORT_GRACE_S, self.settings.poll_timeout_ms / 2000)
        return now - self._short_since >= grace

    def _lost_before(self, low: int, first: int) -> None:
        self.report(f"Cannot fetch records in [{self.pos}, {min(first, low)}) of {self.label}: "
                    f"the earliest offset is now {low}", self.settings.fail_on_data_loss)

    async def _on_error(self, code: int) -> None:
        r, fail = self.r, self.settings.fail_on_data_loss
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            low, high = await self._watermarks()
            if self.pos < low:
                self.report(
                    f"Cannot fetch offset {self.pos} of {self.label}: records in [{self.pos}, "
                    f"{min(low, r.end)}) were deleted or aged out (earliest offset is now {low})",
                    fail)
                self.pos = min(low, r.end)
            elif self.pos >= high:
                if not self._short_for_long(high):
                    await asyncio.sleep(RETRY_BACKOFF_S)
                    return
                self.report(
                    f"Cannot fetch offset {self.pos} of {self.label}: the partition ends at "
                    f"offset {high}, before the range [{r.start}, {r.end})", fail)
                self.pos = r.end
            return
        if code in _DENIED:
            raise ReadRefused(f"reading {self.label} at offset {self.pos} failed: "
                               f"{_name(code)}")
        if code in _GONE:
            await self.s.refresh(r.topic)
            if await self._confirmed_gone():
                self._gone(_name(code))
                return
        # a leader moving, a broker restarting: learn the new leader and try again (the poll
        # deadline bounds how long)
        log.debug("transient error reading %s: %s", self.label, _name(code))
        self.s.leaders.pop((r.topic, r.partition), None)
        await asyncio.sleep(RETRY_BACKOFF_S)

    async def _watermarks(self) -> tuple[int, int]:
        """(earliest, latest) offsets of the partition, from its leader."""
        r = self.r
        found = await self._leader()
        if found is None:
            raise BrokerConnectionError(f"{self.label} has no leader")
        client, leader = found
        out = []
        for timestamp in (-2, -1):
            response = await client.request(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, {
                "replica_id": -1, "isolation_level": 0,
                "topics": [{"name": r.topic, "partitions": [{
                    "partition_index": r.partition, "current_leader_epoch": leader.epoch,
                    "timestamp": timestamp}]}]})
            p = response.topics[0].partitions[0]
            if p.error_code:
                raise BrokerConnectionError(
                    f"ListOffsets of {self.label}: {_name(p.error_code)}")
            out.append(int(p.offset))
        return out[0], out[1]
