"""The console's Kafka client: admin calls and a consumer, turned into `strom.console.cluster`
snapshots. Every call is blocking and bounded by the `--timeout`; the web app runs them in
worker threads.

librdkafka's admin client cannot ask for log-dir sizes, so those come from DescribeLogDirs over
`strom.cli.wire` (PLAINTEXT listeners only; elsewhere sizes are shown as unknown).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec

from strom.cli.common import (
    INTERNAL_TOPICS,
    ClientOptions,
    CliError,
    UsageError,
    kafka_error_code,
    kafka_error_text,
)
from strom.cli.groups import GROUP_ID_NOT_FOUND, state_name, type_name
from strom.cli.wire import Cluster
from strom.console.cluster import (
    BrokerInfo,
    ClusterInfo,
    GroupInfo,
    GroupSummary,
    MemberInfo,
    NotFound,
    PartitionInfo,
    PartitionLag,
    SourceError,
    TopicInfo,
    lag_of,
)
from strom.console.records import RecordView, newest, oldest, record_view, tail_start
from strom.console.sampler import Observation

DESCRIBE_LOG_DIRS = 35
INVALID_GROUP_ID = 24
TP = tuple[str, int]
log = logging.getLogger("strom.console.kafka")


class _ClientErrors:
    """librdkafka's asynchronous errors: the last few, to say why the cluster cannot be reached
    (a long-running process must not keep them all)."""

    def __init__(self) -> None:
        self.recent: deque[str] = deque(maxlen=20)
        # librdkafka logs every failed connection attempt; the pages say when the cluster is away
        self.logger = logging.getLogger("strom.console.librdkafka")
        self.logger.propagate = False
        if not self.logger.handlers:
            self.logger.addHandler(logging.NullHandler())

    def __call__(self, error: KafkaError) -> None:
        self.recent.append(error.str())

    def install(self, conf: dict[str, Any]) -> dict[str, Any]:
        conf["error_cb"] = self
        conf["logger"] = self.logger
        return conf


class KafkaSource:
    """One admin client and one consumer (used under a lock) for the whole console."""

    def __init__(self, opts: ClientOptions, records_per_page: int = 20) -> None:
        self.opts = opts
        self.records_per_page = records_per_page
        self.errors = _ClientErrors()
        conf = opts.config()
        self._plaintext = str(conf.get("security.protocol", "PLAINTEXT")).upper() == "PLAINTEXT"
        consumer_conf = self.errors.install(opts.config(**{
            "group.id": f"strom-console-{uuid.uuid4().hex}",  # librdkafka wants one; never used
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "enable.partition.eof": True, "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100}))
        try:
            self.admin = AdminClient(self.errors.install(conf))
            self._consumer = Consumer(consumer_conf)
        except KafkaException as exc:
            raise UsageError(f"invalid client configuration: {kafka_error_text(exc)}") from None
        self._consumer_lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        with self._consumer_lock:
            if not self._closed:
                self._closed = True
                self._consumer.close()

    # -- helpers -----------------------------------------------------------------------------

    def _result(self, future: concurrent.futures.Future) -> Any:
        try:
            return future.result(timeout=self.opts.timeout + 1)
        except concurrent.futures.TimeoutError:
            raise SourceError(f"no answer from {self.opts.bootstrap} within "
                              f"{self.opts.timeout:g}s") from None

    def _kwargs(self) -> dict[str, float]:
        return {"request_timeout": self.opts.timeout}

    def _metadata(self) -> Any:
        self.admin.poll(0)  # serve queued error callbacks
        try:
            return self.admin.list_topics(timeout=self.opts.timeout)
        except KafkaException as exc:
            self.admin.poll(0)
            last = f" (last: {self.errors.recent[-1]})" if self.errors.recent else ""
            raise SourceError(f"cannot reach {self.opts.bootstrap}: "
                              f"{kafka_error_text(exc)}{last}") from None

    def _offsets(self, partitions: Iterable[TP], spec: OffsetSpec) -> dict[TP, int | None]:
        wanted = list(partitions)
        if not wanted:
            return {}
        futures = self.admin.list_offsets({TopicPartition(t, p): spec for t, p in wanted},
                                          **self._kwargs())
        found: dict[TP, int | None] = {}
        for tp, future in futures.items():
            try:
                found[(tp.topic, tp.partition)] = self._result(future).offset
            except SourceError:
                raise
            except KafkaException:
                found[(tp.topic, tp.partition)] = None  # e.g. no leader right now
        return found

    # -- cluster and topics ------------------------------------------------------------------

    def cluster(self) -> ClusterInfo:
        try:
            desc = self._result(self.admin.describe_cluster(**self._kwargs()))
        except KafkaException as exc:
            raise SourceError(f"cannot describe the cluster: {kafka_error_text(exc)}") from None
        controller = desc.controller.id if desc.controller is not None else None
        brokers = tuple(sorted(
            (BrokerInfo(n.id, n.host, n.port, n.rack, n.id == controller) for n in desc.nodes),
            key=lambda b: b.id))
        return ClusterInfo(desc.cluster_id, controller, brokers)

    def topics(self) -> list[TopicInfo]:
        return self._topic_infos(self._metadata().topics.values())

    def topic(self, name: str) -> TopicInfo:
        meta = self._metadata()
        if name not in meta.topics:
            raise NotFound(f"no topic named {name!r}")
        return self._topic_infos([meta.topics[name]])[0]

    def _topic_infos(self, metas: Iterable[Any]) -> list[TopicInfo]:
        metas = sorted(metas, key=lambda m: m.topic)
        tps = [(m.topic, p) for m in metas for p in m.partitions]
        starts = self._offsets(tps, OffsetSpec.earliest())
        ends = self._offsets(tps, OffsetSpec.latest())
        sizes = self.log_sizes({(m.topic, p): pm.leader for m in metas
                                for p, pm in m.partitions.items()})
        infos = []
        for m in metas:
            parts = tuple(
                PartitionInfo(p, pm.leader if pm.leader >= 0 else None, tuple(pm.replicas),
                              tuple(pm.isrs), starts.get((m.topic, p)), ends.get((m.topic, p)),
                              sizes.get((m.topic, p)) if sizes is not None else None)
                for p, pm in sorted(m.partitions.items()))
            infos.append(TopicInfo(m.topic, m.topic in INTERNAL_TOPICS, parts))
        return infos

    def topic_configs(self, name: str) -> dict[str, str]:
        """The topic's configs that are set on it (not defaults)."""
        resource = ConfigResource("topic", name)
        try:
            entries = self._result(
                self.admin.describe_configs([resource], **self._kwargs())[resource])
        except KafkaException as exc:
            raise SourceError(f"cannot describe the configs of {name}: "
                              f"{kafka_error_text(exc)}") from None
        return {n: e.value for n, e in entries.items()
                if not e.is_default and e.value is not None}

    def log_sizes(self, leaders: dict[TP, int]) -> dict[TP, int] | None:
        """Bytes of each partition's leader replica (DescribeLogDirs to each leader); None when
        the listener is not PLAINTEXT or a broker cannot say."""
        if not self._plaintext or not leaders:
            return None
        try:
            wire = Cluster.connect(self.opts.bootstrap, self.opts.timeout)
        except CliError as exc:
            log.info("no log-dir sizes: %s", exc.message)
            return None
        sizes: dict[TP, int] = {}
        try:
            for broker_id in sorted({b for b in leaders.values() if b in wire.brokers}):
                conn = wire.conn(broker_id)
                version = conn.version(DESCRIBE_LOG_DIRS, 4, "DescribeLogDirs")
                resp = conn.call(DESCRIBE_LOG_DIRS, version, {"topics": None})
                for result in resp.results:
                    for t in result.topics:
                        for p in t.partitions:
                            key = (t.name, p.partition_index)
                            if leaders.get(key) == broker_id and not p.is_future_key:
                                sizes[key] = p.partition_size
        except CliError as exc:
            log.info("no log-dir sizes: %s", exc.message)
            return None
        finally:
            wire.close()
        return sizes

    # -- groups ------------------------------------------------------------------------------

    def group_ids(self) -> list[str]:
        try:
            listed = self._result(self.admin.list_consumer_groups(**self._kwargs()))
        except KafkaException as exc:
            raise SourceError(f"cannot list groups: {kafka_error_text(exc)}") from None
        return sorted(g.group_id for g in listed.valid)

    def groups(self) -> list[GroupSummary]:
        return [g.summary() for g in self._describe(self.group_ids()).values()]

    def group(self, group_id: str) -> GroupInfo:
        found = self._describe([group_id])
        if group_id not in found:
            raise NotFound(f"no consumer group named {group_id!r}")
        return found[group_id]

    def _describe(self, group_ids: list[str]) -> dict[str, GroupInfo]:
        if not group_ids:
            return {}
        futures = self.admin.describe_consumer_groups(group_ids, **self._kwargs())
        descs = {}
        for gid, future in futures.items():
            try:
                desc = self._result(future)
            except KafkaException as exc:
                if kafka_error_code(exc) in (GROUP_ID_NOT_FOUND, INVALID_GROUP_ID):
                    continue  # no such group (an empty id is none either)
                raise SourceError(f"cannot describe group {gid!r}: "
                                  f"{kafka_error_text(exc)}") from None
            if state_name(desc.state) == "Dead" and not desc.members:
                continue
            descs[gid] = desc
        committed = {gid: self.committed(gid) for gid in descs}
        owners: dict[str, dict[TP, str]] = {
            gid: {(tp.topic, tp.partition): m.client_id for m in d.members
                  for tp in m.assignment.topic_partitions} for gid, d in descs.items()}
        ends = self._offsets({tp for gid in descs for tp in (*committed[gid], *owners[gid])},
                             OffsetSpec.latest())
        infos = {}
        for gid, d in sorted(descs.items()):
            members = tuple(MemberInfo(
                m.member_id, m.client_id, m.host, m.group_instance_id,
                tuple(sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)))
                for m in d.members)
            lags = tuple(PartitionLag(t, p, committed[gid].get((t, p)), ends.get((t, p)),
                                      owners[gid].get((t, p)))
                         for t, p in sorted({*committed[gid], *owners[gid]}))
            node = d.coordinator
            coordinator = f"{node.host}:{node.port} ({node.id})" if node is not None else "-"
            infos[gid] = GroupInfo(gid, state_name(d.state), type_name(getattr(d, "type", "")),
                                   d.partition_assignor or "", coordinator, members, lags)
        return infos

    def committed(self, group_id: str) -> dict[TP, int]:
        request = [ConsumerGroupTopicPartitions(group_id)]
        try:
            listed = self._result(
                self.admin.list_consumer_group_offsets(request, **self._kwargs())[group_id])
        except KafkaException as exc:
            raise SourceError(f"cannot read the offsets of group {group_id!r}: "
                              f"{kafka_error_text(exc)}") from None
        return {(tp.topic, tp.partition): tp.offset for tp in listed.topic_partitions or ()
                if tp.error is None and tp.offset >= 0}

    # -- the sampler's reading ---------------------------------------------------------------

    def observe(self) -> Observation:
        """Log-end offsets and sizes summed per topic, committed offsets and lag per group."""
        meta = self._metadata()
        leaders = {(t, p): pm.leader for t, m in meta.topics.items() if t not in INTERNAL_TOPICS
                   for p, pm in m.partitions.items()}
        ends = self._offsets(leaders, OffsetSpec.latest())
        end_sums: dict[str, int] = {}
        for (t, _), end in ends.items():
            end_sums[t] = end_sums.get(t, 0) + (end or 0)
        size_sums: dict[str, int] = {}
        for (t, _), size in (self.log_sizes(leaders) or {}).items():
            size_sums[t] = size_sums.get(t, 0) + size
        committed_sums, lags = {}, {}
        for gid in self.group_ids():
            committed = self.committed(gid)
            committed_sums[gid] = sum(committed.values())
            lags[gid] = sum(lag_of(off, ends.get(tp)) or 0 for tp, off in committed.items())
        return Observation(time.time(), end_sums, committed_sums, lags, size_sums)

    # -- records -----------------------------------------------------------------------------

    def recent(self, topic: TopicInfo) -> list[RecordView]:
        """The newest records of the topic, up to a page from each partition."""
        n = self.records_per_page
        ranges = {p.partition: (tail_start(p.start or 0, p.end, n), p.end)
                  for p in topic.partitions if p.end is not None}
        return newest(self._read(topic.name, ranges, n), n)

    def from_offset(self, topic: TopicInfo, partition: int, offset: int) -> list[RecordView]:
        """A page of records of one partition from `offset` on."""
        match = [p for p in topic.partitions if p.partition == partition]
        if not match:
            raise NotFound(f"topic {topic.name!r} has no partition {partition}")
        end = match[0].end or 0
        n = self.records_per_page
        return self._read(topic.name, {partition: (max(offset, 0), min(offset + n, end))}, n)

    def from_time(self, topic: TopicInfo, timestamp_ms: int) -> list[RecordView]:
        """The first records at or after the time, over all partitions (oldest first)."""
        tps = [(topic.name, p.partition) for p in topic.partitions]
        found = self._offsets(tps, OffsetSpec.for_timestamp(timestamp_ms))
        ends = {p.partition: p.end or 0 for p in topic.partitions}
        n = self.records_per_page
        ranges = {p: (off, min(off + n, ends[p])) for (_, p), off in found.items()
                  if off is not None and off >= 0}
        return oldest(self._read(topic.name, ranges, n), n)

    def _read(self, topic: str, ranges: dict[int, tuple[int, int]],
              per_partition: int) -> list[RecordView]:
        """Records of [start, stop) per partition, at most `per_partition` from each; what was
        read when the timeout passes is returned as it is."""
        ranges = {p: r for p, r in ranges.items() if r[0] < r[1]}
        if not ranges:
            return []
        deadline = time.monotonic() + self.opts.timeout
        found: list[RecordView] = []
        with self._consumer_lock:
            if self._closed:
                raise SourceError("the console is shutting down")
            consumer = self._consumer
            consumer.assign([TopicPartition(topic, p, r[0]) for p, r in ranges.items()])
            try:
                pending = dict.fromkeys(ranges, 0)
                while pending and time.monotonic() < deadline:
                    for msg in consumer.consume(num_messages=500, timeout=0.1):
                        p = msg.partition()
                        if p not in pending:
                            continue
                        error = msg.error()
                        if error is not None:
                            if error.code() == KafkaError._PARTITION_EOF:
                                del pending[p]
                            continue
                        offset = msg.offset()
                        if offset is None or offset >= ranges[p][1]:
                            del pending[p]
                            continue
                        found.append(record_view(msg))
                        pending[p] += 1
                        if pending[p] >= per_partition or offset + 1 >= ranges[p][1]:
                            del pending[p]
            finally:
                consumer.unassign()
        return found
