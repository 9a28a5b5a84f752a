"""Broker configs: server.properties + --override flags, Kafka's names and defaults.

Resolution order, as in Kafka: dynamic per-broker > dynamic cluster default > static
(server.properties / overrides) > built-in default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.config.defs import (
    INT_MAX,
    LONG_MAX,
    ConfigDef,
    ConfigError,
    ConfigRegistry,
    ConfigSource,
    ConfigType,
    at_least,
    between,
    one_of,
)
from strom.config.kraft import KRAFT_CONFIGS
from strom.config.lake import LAKE_CONFIGS
from strom.config.metrics import METRICS_CONFIGS
from strom.config.registry import REGISTRY_CONFIGS
from strom.config.rest import REST_CONFIGS
from strom.config.security import SECURITY_CONFIGS
from strom.config.topic import (
    BROKER_SYNONYMS,
    COMPRESSION_TYPES,
    TOPIC_CONFIGS,
    UNIT_FACTORS,
    ResolvedValue,
)

T = ConfigType

BROKER_CONFIGS = ConfigRegistry()
BROKER_CONFIGS.add(
    # identity and network
    ConfigDef("broker.id", T.INT, 0, "this broker's id", at_least(0), read_only=True),
    ConfigDef("broker.rack", T.STRING, None, "rack of this broker", read_only=True),
    ConfigDef("listeners", T.LIST, ["PLAINTEXT://:9092"], "listener URIs", read_only=True),
    ConfigDef("advertised.listeners", T.LIST, None, "listeners published to clients", read_only=True),
    ConfigDef("listener.security.protocol.map", T.STRING,
              "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
              "listener name to security protocol", read_only=True),
    ConfigDef("socket.request.max.bytes", T.INT, 104857600, "largest request accepted", at_least(1),
              read_only=True),
    ConfigDef("socket.send.buffer.bytes", T.INT, 102400, "SO_SNDBUF (-1: OS default)", read_only=True),
    # Kafka's default is 102400. A fixed SO_RCVBUF switches off Linux's receive-buffer
    # autotuning, and 1 MiB produce requests then arrive through a ~100 KiB window: measured on
    # loopback, the OS default gave 15-25% more 10 KiB produce MB/s for 10-25% less broker CPU.
    ConfigDef("socket.receive.buffer.bytes", T.INT, -1,
              "SO_RCVBUF (-1: OS default with autotuning; Kafka's default is 102400)", read_only=True),
    # Kafka's default is 50. Kafka accepts on a dedicated thread; Strom's event loop accepts
    # more slowly, so bursts of connects (every client reconnecting after a restart) overflowed
    # a 50-deep queue and waited 1 s for the kernel's SYN retry (measured: 2,000 back-to-back
    # connects, 20-30 waited 1 s at 50, 0-1 at 1024). The kernel caps it at net.core.somaxconn.
    ConfigDef("socket.listen.backlog.size", T.INT, 1024,
              "accept backlog; also how many connections may wait for a max.connections slot "
              "(Kafka's default is 50)", at_least(1), read_only=True),
    ConfigDef("connections.max.idle.ms", T.LONG, 600000, "idle connections are closed after this",
              read_only=True),
    ConfigDef("max.connections", T.INT, INT_MAX,
              "connections the broker serves at once; more wait for a slot", at_least(0),
              read_only=True),
    ConfigDef("max.connections.per.ip", T.INT, INT_MAX,
              "connections from one address; more are closed", at_least(0), read_only=True),
    ConfigDef("max.connections.per.ip.overrides", T.STRING, "",
              "per-address limits, 'host:limit,host:limit'", read_only=True),
    ConfigDef("queued.max.request.bytes", T.LONG, -1,
              "bytes that requests being read may hold before reading pauses (-1: no limit)",
              read_only=True),
    ConfigDef("num.network.threads", T.INT, 3, "accepted for compatibility; Strom uses one event loop",
              at_least(1), implemented=False),
    ConfigDef("leader.replication.throttled.rate", T.LONG, LONG_MAX,
              "bytes per second a leader sends to its throttled replicas out of the ISR "
              "(leader.replication.throttled.replicas)", at_least(0)),
    ConfigDef("follower.replication.throttled.rate", T.LONG, LONG_MAX,
              "bytes per second a follower fetches for its throttled replicas out of the ISR "
              "(follower.replication.throttled.replicas)", at_least(0)),
    ConfigDef("replication.quota.window.num", T.INT, 11,
              "samples in the window replication throttles are measured over", at_least(1),
              read_only=True),
    ConfigDef("replication.quota.window.size.seconds", T.INT, 1,
              "seconds per sample of replication throttles", at_least(1), read_only=True),
    ConfigDef("quota.window.num", T.INT, 11,
              "samples in the window client quotas are measured over", at_least(1),
              read_only=True),
    ConfigDef("quota.window.size.seconds", T.INT, 1,
              "seconds per sample of client quotas", at_least(1), read_only=True),
    ConfigDef("controller.quota.window.num", T.INT, 11,
              "samples in the window controller_mutation_rate is measured over", at_least(1),
              read_only=True),
    ConfigDef("controller.quota.window.size.seconds", T.INT, 1,
              "seconds per sample of controller_mutation_rate", at_least(1), read_only=True),
    ConfigDef("num.io.threads", T.INT, 8, "accepted for compatibility; Strom uses one event loop",
              at_least(1), implemented=False),
    ConfigDef("queued.max.requests", T.INT, 500,
              "size of Kafka's queue between network and I/O threads (Strom has no such queue; "
              "it answers a connection's requests one at a time)", at_least(1), read_only=True,
              implemented=False),
    # logs
    ConfigDef("log.dirs", T.LIST, None, "directories holding the partition logs", read_only=True),
    ConfigDef("log.dir", T.STRING, "/tmp/kafka-logs", "log directory when log.dirs is unset",
              read_only=True),
    ConfigDef("num.partitions", T.INT, 1, "default partitions of auto-created topics", at_least(1)),
    ConfigDef("default.replication.factor", T.INT, 1, "default replication factor", at_least(1)),
    ConfigDef("auto.create.topics.enable", T.BOOLEAN, True, "create topics on metadata requests",
              read_only=True),
    ConfigDef("delete.topic.enable", T.BOOLEAN, True, "allow topic deletion", read_only=True),
    ConfigDef("message.max.bytes", T.INT, 1048588, "largest record batch", at_least(0)),
    ConfigDef("log.segment.bytes", T.INT, 1073741824, "segment size", at_least(14)),
    ConfigDef("log.roll.ms", T.LONG, None, "segment roll time"),
    ConfigDef("log.roll.hours", T.INT, 168, "segment roll time in hours", at_least(1)),
    ConfigDef("log.roll.jitter.ms", T.LONG, None, "segment roll jitter"),
    ConfigDef("log.roll.jitter.hours", T.INT, 0, "segment roll jitter in hours", at_least(0)),
    ConfigDef("log.retention.ms", T.LONG, None, "retention time (-1: unlimited)"),
    ConfigDef("log.retention.minutes", T.INT, None, "retention time in minutes"),
    ConfigDef("log.retention.hours", T.INT, 168, "retention time in hours"),
    ConfigDef("log.retention.bytes", T.LONG, -1, "retention size per partition"),
    ConfigDef("log.retention.check.interval.ms", T.LONG, 300000, "how often retention runs",
              at_least(1), read_only=True),
    ConfigDef("log.index.interval.bytes", T.INT, 4096, "index interval", at_least(0)),
    ConfigDef("log.index.size.max.bytes", T.INT, 10485760, "index size", at_least(4)),
    ConfigDef("log.flush.interval.messages", T.LONG, LONG_MAX, "fsync every N messages", at_least(1)),
    ConfigDef("log.flush.interval.ms", T.LONG, None, "fsync interval"),
    ConfigDef("log.flush.scheduler.interval.ms", T.LONG, LONG_MAX, "how often flush is checked",
              read_only=True),
    ConfigDef("log.flush.offset.checkpoint.interval.ms", T.INT, 60000,
              "how often recovery points are checkpointed", at_least(0), read_only=True),
    ConfigDef("log.flush.start.offset.checkpoint.interval.ms", T.INT, 60000,
              "how often log start offsets are checkpointed (Strom writes them with the recovery "
              "points, every log.flush.offset.checkpoint.interval.ms)", at_least(0), read_only=True,
              implemented=False),
    ConfigDef("log.segment.delete.delay.ms", T.LONG, 60000, "delay before deleting files", at_least(0)),
    ConfigDef("log.cleanup.policy", T.LIST, ["delete"], "default cleanup policy",
              one_of("compact", "delete")),
    ConfigDef("log.message.timestamp.type", T.STRING, "CreateTime", "default timestamp type",
              one_of("CreateTime", "LogAppendTime")),
    ConfigDef("log.message.timestamp.before.max.ms", T.LONG, LONG_MAX, "timestamp lower bound",
              at_least(0)),
    ConfigDef("log.message.timestamp.after.max.ms", T.LONG, 3600000, "timestamp upper bound",
              at_least(0)),
    ConfigDef("log.preallocate", T.BOOLEAN, False,
              "preallocate segments (Strom never preallocates segment files)", implemented=False),
    ConfigDef("log.cleaner.enable", T.BOOLEAN, True, "run the log cleaner", read_only=True),
    ConfigDef("log.cleaner.delete.retention.ms", T.LONG, 86400000, "tombstone retention", at_least(0)),
    ConfigDef("log.cleaner.min.compaction.lag.ms", T.LONG, 0, "min compaction lag", at_least(0)),
    ConfigDef("log.cleaner.max.compaction.lag.ms", T.LONG, LONG_MAX, "max compaction lag", at_least(1)),
    ConfigDef("log.cleaner.min.cleanable.ratio", T.DOUBLE, 0.5, "dirty ratio", between(0, 1)),
    ConfigDef("log.cleaner.dedupe.buffer.size", T.LONG, 134217728, "cleaner key map memory",
              at_least(0)),
    ConfigDef("log.cleaner.backoff.ms", T.LONG, 15000, "cleaner idle backoff", at_least(0)),
    ConfigDef("log.cleaner.threads", T.INT, 1,
              "cleaner workers, each cleaning one log at a time with its share of the dedupe "
              "buffer (0: no cleaning)", at_least(0)),
    ConfigDef("log.cleaner.io.buffer.load.factor", T.DOUBLE, 0.9, "key map load factor",
              between(0, 1), read_only=True),
    ConfigDef("producer.id.expiration.ms", T.INT, 86400000,
              "idle time after which a producer's state is forgotten", at_least(1)),
    ConfigDef("producer.id.expiration.check.interval.ms", T.INT, 600000,
              "how often expired producer state is removed", at_least(1), read_only=True),
    ConfigDef("compression.type", T.STRING, "producer", "final compression of topic data",
              one_of(*COMPRESSION_TYPES)),
    ConfigDef("compression.gzip.level", T.INT, -1, "gzip level", between(-1, 9)),
    ConfigDef("compression.lz4.level", T.INT, 9, "lz4 level", between(1, 17)),
    ConfigDef("compression.zstd.level", T.INT, 3, "zstd level", between(-131072, 22)),
    ConfigDef("min.insync.replicas", T.INT, 1, "min ISR for acks=all", at_least(1)),
    ConfigDef("unclean.leader.election.enable", T.BOOLEAN, False, "unclean leader election"),
    ConfigDef("fetch.max.bytes", T.INT, 57671680, "broker cap on a fetch response", at_least(1024)),
    ConfigDef("max.request.partition.size.limit", T.INT, 2000,
              "partitions a DescribeTopicPartitions response holds at most (caps the "
              "client's limit)", at_least(1), read_only=True),
    ConfigDef("max.open.files", T.INT, 4096,
              "Strom: segment files kept open at once (LRU); lower than the process fd limit",
              at_least(16), read_only=True),
    # groups and transactions (used by the coordinators)
    ConfigDef("offsets.topic.num.partitions", T.INT, 50, "partitions of __consumer_offsets",
              at_least(1), read_only=True),
    ConfigDef("offsets.topic.replication.factor", T.SHORT, 3,
              "RF of __consumer_offsets (a single node uses 1)", at_least(1),
              read_only=True),
    ConfigDef("offsets.commit.timeout.ms", T.INT, 5000,
              "how long an offset commit waits for the offsets topic's replicas (clusters)",
              at_least(1), read_only=True),
    ConfigDef("offsets.topic.segment.bytes", T.INT, 104857600, "segment size of __consumer_offsets",
              at_least(1), read_only=True),
    ConfigDef("offsets.retention.minutes", T.INT, 10080, "offset retention for empty groups",
              at_least(1), read_only=True),
    ConfigDef("offsets.retention.check.interval.ms", T.LONG, 600000, "offset expiry check",
              at_least(1), read_only=True),
    ConfigDef("group.initial.rebalance.delay.ms", T.INT, 3000, "delay of the first rebalance",
              read_only=True),
    ConfigDef("group.min.session.timeout.ms", T.INT, 6000, "min session timeout", read_only=True),
    ConfigDef("group.max.session.timeout.ms", T.INT, 1800000, "max session timeout", read_only=True),
    ConfigDef("group.max.size", T.INT, INT_MAX, "max members per group", at_least(1), read_only=True),
    ConfigDef("offset.metadata.max.bytes", T.INT, 4096, "max metadata size of a committed offset",
              read_only=True),
    ConfigDef("group.coordinator.rebalance.protocols", T.LIST, ["classic", "consumer", "streams"],
              "rebalance protocols the group coordinator accepts", read_only=True),
    ConfigDef("group.consumer.session.timeout.ms", T.INT, 45000,
              "session timeout of consumer-protocol (KIP-848) members", at_least(1),
              read_only=True),
    ConfigDef("group.consumer.min.session.timeout.ms", T.INT, 45000,
              "min consumer-protocol session timeout", at_least(1), read_only=True),
    ConfigDef("group.consumer.max.session.timeout.ms", T.INT, 60000,
              "max consumer-protocol session timeout", at_least(1), read_only=True),
    ConfigDef("group.consumer.heartbeat.interval.ms", T.INT, 5000,
              "heartbeat interval given to consumer-protocol members", at_least(1),
              read_only=True),
    ConfigDef("group.consumer.min.heartbeat.interval.ms", T.INT, 5000,
              "min consumer-protocol heartbeat interval", at_least(1), read_only=True),
    ConfigDef("group.consumer.max.heartbeat.interval.ms", T.INT, 15000,
              "max consumer-protocol heartbeat interval", at_least(1), read_only=True),
    ConfigDef("group.consumer.max.size", T.INT, INT_MAX, "max members per consumer group",
              at_least(1), read_only=True),
    ConfigDef("group.consumer.assignors", T.LIST, ["uniform", "range"],
              "server-side assignors; the first is the default", read_only=True),
    ConfigDef("group.consumer.migration.policy", T.STRING, "bidirectional",
              "online migration of non-empty groups between the classic and consumer protocols: "
              "bidirectional, upgrade (classic to consumer only), downgrade (consumer to "
              "classic only) or disabled",
              one_of("bidirectional", "upgrade", "downgrade", "disabled", case_insensitive=True),
              read_only=True),
    ConfigDef("group.streams.session.timeout.ms", T.INT, 45000,
              "session timeout of streams-protocol (KIP-1071) members", at_least(1),
              read_only=True),
    ConfigDef("group.streams.min.session.timeout.ms", T.INT, 45000,
              "min streams-protocol session timeout", at_least(1), read_only=True),
    ConfigDef("group.streams.max.session.timeout.ms", T.INT, 60000,
              "max streams-protocol session timeout", at_least(1), read_only=True),
    ConfigDef("group.streams.heartbeat.interval.ms", T.INT, 5000,
              "heartbeat interval given to streams-protocol members", at_least(1),
              read_only=True),
    ConfigDef("group.streams.min.heartbeat.interval.ms", T.INT, 5000,
              "min streams-protocol heartbeat interval", at_least(1), read_only=True),
    ConfigDef("group.streams.max.heartbeat.interval.ms", T.INT, 15000,
              "max streams-protocol heartbeat interval", at_least(1), read_only=True),
    ConfigDef("group.streams.max.size", T.INT, INT_MAX, "max members per streams group",
              at_least(1), read_only=True),
    ConfigDef("group.streams.num.standby.replicas", T.INT, 0,
              "standby replicas of each task in streams groups", at_least(0), read_only=True),
    ConfigDef("group.streams.max.standby.replicas", T.INT, 2,
              "max standby replicas of streams groups", at_least(0), read_only=True),
    ConfigDef("group.streams.initial.rebalance.delay.ms", T.INT, 3000,
              "delay of the first assignment of a streams group that was empty", at_least(0),
              read_only=True),
    # the broker-level values and bounds of group configs (strom.config.group) and share groups
    ConfigDef("group.consumer.assignment.interval.ms", T.INT, 1000,
              "interval between assignment updates of a consumer group (Strom computes "
              "assignments at once)", at_least(0), implemented=False),
    ConfigDef("group.consumer.min.assignment.interval.ms", T.INT, 0,
              "min consumer.assignment.interval.ms of a group", at_least(0), read_only=True),
    ConfigDef("group.consumer.max.assignment.interval.ms", T.INT, 15000,
              "max consumer.assignment.interval.ms of a group", at_least(0), read_only=True),
    ConfigDef("group.streams.assignment.interval.ms", T.INT, 1000,
              "interval between assignment updates of a streams group (Strom computes "
              "assignments at once)", at_least(0), implemented=False),
    ConfigDef("group.streams.min.assignment.interval.ms", T.INT, 0,
              "min streams.assignment.interval.ms of a group", at_least(0), read_only=True),
    ConfigDef("group.streams.max.assignment.interval.ms", T.INT, 15000,
              "max streams.assignment.interval.ms of a group", at_least(0), read_only=True),
    ConfigDef("group.streams.assignors", T.LIST, ["sticky"],
              "task assignors of streams groups; the first is the default (Strom has sticky)",
              one_of("sticky"), read_only=True),
    ConfigDef("group.streams.rack.aware.assignment.tags", T.LIST, [],
              "client tag keys standby replicas are spread over (Strom's assignor does not "
              "use client tags)", read_only=True, implemented=False),
    ConfigDef("group.share.max.size", T.INT, 200, "max members per share group",
              between(1, 1000), read_only=True),
    ConfigDef("group.share.session.timeout.ms", T.INT, 45000,
              "session timeout of share group members", at_least(1), read_only=True),
    ConfigDef("group.share.min.session.timeout.ms", T.INT, 45000,
              "min share group session timeout", at_least(1), read_only=True),
    ConfigDef("group.share.max.session.timeout.ms", T.INT, 60000,
              "max share group session timeout", at_least(1), read_only=True),
    ConfigDef("group.share.heartbeat.interval.ms", T.INT, 5000,
              "heartbeat interval given to share group members", at_least(1), read_only=True),
    ConfigDef("group.share.min.heartbeat.interval.ms", T.INT, 5000,
              "min share group heartbeat interval", at_least(1), read_only=True),
    ConfigDef("group.share.max.heartbeat.interval.ms", T.INT, 15000,
              "max share group heartbeat interval", at_least(1), read_only=True),
    ConfigDef("group.share.record.lock.duration.ms", T.INT, 30000,
              "acquisition lock duration of records delivered to share groups",
              between(1000, 3600000), read_only=True),
    ConfigDef("group.share.min.record.lock.duration.ms", T.INT, 15000,
              "min share.record.lock.duration.ms of a group", between(1000, 30000),
              read_only=True),
    ConfigDef("group.share.max.record.lock.duration.ms", T.INT, 60000,
              "max share.record.lock.duration.ms of a group", between(30000, 3600000),
              read_only=True),
    ConfigDef("group.share.delivery.count.limit", T.INT, 5,
              "delivery attempts of a record delivered to a share group", between(2, 10),
              read_only=True),
    ConfigDef("group.share.min.delivery.count.limit", T.INT, 2,
              "min share.delivery.count.limit of a group", between(2, 5), read_only=True),
    ConfigDef("group.share.max.delivery.count.limit", T.INT, 10,
              "max share.delivery.count.limit of a group", between(5, 25), read_only=True),
    ConfigDef("group.share.partition.max.record.locks", T.INT, 2000,
              "record locks per share-partition", between(100, 10000), read_only=True),
    ConfigDef("group.share.min.partition.max.record.locks", T.INT, 100,
              "min share.partition.max.record.locks of a group", between(100, 2000),
              read_only=True),
    ConfigDef("group.share.max.partition.max.record.locks", T.INT, 4000,
              "max share.partition.max.record.locks of a group", between(2000, 10000),
              read_only=True),
    ConfigDef("group.share.assignment.interval.ms", T.INT, 1000,
              "interval between assignment updates of a share group", at_least(0),
              implemented=False),
    ConfigDef("group.share.min.assignment.interval.ms", T.INT, 0,
              "min share.assignment.interval.ms of a group", at_least(0), read_only=True),
    ConfigDef("group.share.max.assignment.interval.ms", T.INT, 15000,
              "max share.assignment.interval.ms of a group", at_least(0), read_only=True),
    ConfigDef("errors.deadletterqueue.topic.name.prefix", T.STRING, "dlq.",
              "prefix the dead-letter topics of share groups must have"),
    ConfigDef("errors.deadletterqueue.auto.create.topics.enable", T.BOOLEAN, False,
              "create a share group's dead-letter topic on first use (not yet: a missing "
              "topic is logged and the records archived)", implemented=False),
    ConfigDef("group.share.max.share.sessions", T.INT, 2000,
              "max share sessions open on this broker (one per member fetching from it)",
              at_least(1), read_only=True),
    ConfigDef("group.share.assignors", T.LIST, ["simple"],
              "share-group assignors: only Kafka's simple assignor", one_of("simple"),
              read_only=True),
    ConfigDef("transaction.state.log.num.partitions", T.INT, 50, "partitions of __transaction_state",
              at_least(1), read_only=True),
    ConfigDef("transaction.state.log.replication.factor", T.SHORT, 3,
              "RF of __transaction_state (a single node uses 1)",
              at_least(1), read_only=True),
    ConfigDef("transaction.state.log.min.isr", T.INT, 2, "min ISR of __transaction_state", at_least(1),
              read_only=True),
    ConfigDef("transaction.max.timeout.ms", T.INT, 900000, "max transaction timeout", at_least(1),
              read_only=True),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", T.INT, 10000,
              "how often timed-out transactions are aborted", at_least(1), read_only=True),
    ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", T.INT, 3600000,
              "how often expired transactional ids are removed", at_least(1), read_only=True),
    ConfigDef("request.timeout.ms", T.INT, 30000,
              "how long a transaction-state write and a transaction marker wait for their "
              "partition's replicas (clusters)", at_least(0), read_only=True),
    ConfigDef("transaction.state.log.segment.bytes", T.INT, 104857600,
              "segment size of __transaction_state", at_least(1), read_only=True),
    ConfigDef("transactional.id.expiration.ms", T.INT, 604800000, "transactional id expiry",
              at_least(1), read_only=True),
    # share groups (KIP-932): the share coordinator and __share_group_state
    ConfigDef("share.coordinator.state.topic.num.partitions", T.INT, 50,
              "partitions of __share_group_state", at_least(1), read_only=True),
    ConfigDef("share.coordinator.state.topic.replication.factor", T.SHORT, 3,
              "RF of __share_group_state (a single node uses 1)", at_least(1), read_only=True),
    ConfigDef("share.coordinator.state.topic.min.isr", T.SHORT, 2,
              "min ISR of __share_group_state", at_least(1), read_only=True),
    ConfigDef("share.coordinator.state.topic.segment.bytes", T.INT, 104857600,
              "segment size of __share_group_state", at_least(1), read_only=True),
    ConfigDef("share.coordinator.snapshot.update.records.per.snapshot", T.INT, 500,
              "update records the share coordinator writes between two snapshots of a share "
              "partition", between(0, 500), read_only=True),
    ConfigDef("share.coordinator.write.timeout.ms", T.INT, 5000,
              "how long a share-state write waits for __share_group_state's replicas "
              "(clusters)", at_least(1), read_only=True),
    ConfigDef("share.coordinator.state.topic.prune.interval.ms", T.INT, 300000,
              "how often records no share partition needs any more are deleted from "
              "__share_group_state", at_least(1), read_only=True),
    ConfigDef("share.coordinator.threads", T.INT, 1,
              "accepted for compatibility; Strom's share coordinator runs on the event loop",
              at_least(1), read_only=True, implemented=False),
    ConfigDef("share.coordinator.load.buffer.size", T.INT, 5242880,
              "read size when loading __share_group_state (Strom reads 1 MiB at a time)",
              at_least(1), read_only=True, implemented=False),
    ConfigDef("share.coordinator.state.topic.compression.codec", T.INT, 0,
              "compression of __share_group_state records (Strom writes them uncompressed)",
              read_only=True, implemented=False),
    ConfigDef("share.coordinator.append.linger.ms", T.INT, -1,
              "how long share-state writes wait to be batched (Strom writes each at once)",
              at_least(-1), read_only=True, implemented=False),
    ConfigDef("share.coordinator.cold.partition.snapshot.interval.ms", T.INT, 300000,
              "how often share partitions without writes get a fresh snapshot (Strom does "
              "not rewrite them)", at_least(1), read_only=True, implemented=False),
    ConfigDef("share.coordinator.cached.buffer.max.bytes", T.INT, 1048588,
              "write buffer the share coordinator keeps for reuse (Strom keeps none)",
              at_least(524288), implemented=False),
    # cluster
    ConfigDef("zookeeper.connect", T.STRING, None, "ZooKeeper connect string (clusters)",
              read_only=True),
    ConfigDef("zookeeper.metadata.migration.enable", T.BOOLEAN, False,
              "Strom's own (Kafka 4 removed KIP-866's): on the controllers of a new KRaft "
              "quorum, with the old cluster's zookeeper.connect, mirror a running ZooKeeper-mode "
              "cluster so its brokers can restart in KRaft mode one at a time "
              "(docs/clusters.md)", read_only=True),
    ConfigDef("zookeeper.session.timeout.ms", T.INT, 18000, "ZooKeeper session timeout",
              read_only=True),
    ConfigDef("zookeeper.connection.timeout.ms", T.INT, None,
              "how long to wait for the first ZooKeeper connection (default: the session "
              "timeout)", read_only=True),
    ConfigDef("replica.lag.time.max.ms", T.LONG, 30000, "ISR lag bound", read_only=True),
    ConfigDef("replica.fetch.wait.max.ms", T.INT, 500, "max wait of a follower's fetch",
              at_least(0), read_only=True),
    ConfigDef("replica.fetch.min.bytes", T.INT, 1, "min bytes of a follower's fetch",
              at_least(1), read_only=True),
    ConfigDef("replica.fetch.max.bytes", T.INT, 1048576, "per-partition bytes of a follower's fetch",
              at_least(0), read_only=True),
    ConfigDef("replica.fetch.response.max.bytes", T.INT, 10485760,
              "max bytes of a follower's fetch response", at_least(0), read_only=True),
    ConfigDef("replica.fetch.backoff.ms", T.INT, 1000, "pause after a failed follower fetch",
              at_least(0), read_only=True),
    ConfigDef("replica.socket.timeout.ms", T.INT, 30000, "timeout of broker-to-broker requests",
              at_least(1), read_only=True),
    ConfigDef("replica.high.watermark.checkpoint.interval.ms", T.LONG, 5000,
              "how often high watermarks are checkpointed", at_least(1), read_only=True),
    ConfigDef("controlled.shutdown.max.retries", T.INT, 3,
              "controlled shutdown attempts (Strom makes one, bounded by "
              "zookeeper.session.timeout.ms)", at_least(0), read_only=True, implemented=False),
    ConfigDef("controlled.shutdown.retry.backoff.ms", T.LONG, 5000,
              "pause between controlled shutdown attempts (Strom makes one)", at_least(0),
              read_only=True, implemented=False),
    ConfigDef("controlled.shutdown.enable", T.BOOLEAN, True, "move leaders before stopping",
              read_only=True),
    ConfigDef("auto.leader.rebalance.enable", T.BOOLEAN, True, "preferred leader rebalancing",
              read_only=True),
    ConfigDef("leader.imbalance.check.interval.seconds", T.LONG, 300,
              "how often the controller checks leader balance", at_least(1), read_only=True),
    ConfigDef("leader.imbalance.per.broker.percentage", T.INT, 10,
              "share of a broker's preferred partitions it may not lead before a rebalance",
              between(0, 100), read_only=True),
)
BROKER_CONFIGS.add(*SECURITY_CONFIGS)
BROKER_CONFIGS.add(*METRICS_CONFIGS)
BROKER_CONFIGS.add(*KRAFT_CONFIGS)
BROKER_CONFIGS.add(*REGISTRY_CONFIGS)
BROKER_CONFIGS.add(*REST_CONFIGS)
BROKER_CONFIGS.add(*LAKE_CONFIGS)


@dataclass
class BrokerConfig:
    """Static broker config plus dynamic layers, resolved the way Kafka resolves them."""

    static: dict[str, Any] = field(default_factory=dict)
    dynamic_default: dict[str, Any] = field(default_factory=dict)
    dynamic_broker: dict[str, Any] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)  # as written: a helper process loads it too

    @classmethod
    def load(cls, path: Path | None = None, overrides: Mapping[str, str] | None = None) -> BrokerConfig:
        """Parse and validate each value; names Strom does not know are kept in `unknown` (the
        broker's start-up checks, strom.config.checks, warn about them or refuse them)."""
        raw: dict[str, str] = {}
        if path is not None:
            raw.update(read_properties(path))
        raw.update(overrides or {})
        cfg = cls(raw=raw)
        for name, value in raw.items():
            if name in BROKER_CONFIGS:
                cfg.static[name] = BROKER_CONFIGS.parse(name, value)
            else:
                cfg.unknown[name] = value
        return cfg

    def source_of(self, name: str) -> tuple[Any, ConfigSource]:
        for layer, source in (
            (self.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self.static, ConfigSource.STATIC_BROKER_CONFIG),
        ):
            if name in layer:
                return layer[name], source
        return BROKER_CONFIGS[name].default, ConfigSource.DEFAULT_CONFIG

    def get(self, name: str) -> Any:
        return self.source_of(name)[0]

    def __getitem__(self, name: str) -> Any:
        return self.get(name)

    # -- derived values -------------------------------------------------------------------

    @property
    def broker_id(self) -> int:
        """broker.id; a KRaft node's is its node.id (Kafka: the two must be equal when both
        are set, which `strom.broker.kraft_mode` checks)."""
        node_id = self.get("node.id") if self.get("process.roles") else None
        return int(node_id) if node_id is not None else int(self.get("broker.id"))

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.get("log.dirs") or [self.get("log.dir")]
        return [Path(d) for d in dirs]

    def listeners(self) -> list[tuple[str, str, int]]:
        """(name, host, port) for each listener; host '' means all interfaces."""
        return [parse_listener(s) for s in self.get("listeners")]

    def advertised_listeners(self) -> list[tuple[str, str, int]]:
        adv = self.get("advertised.listeners")
        return [parse_listener(s) for s in adv] if adv else self.listeners()

    def topic_default(self, topic_config: str) -> ResolvedValue:
        """The broker-level default of a topic config, and which broker config it came from.

        An explicitly set synonym wins in synonym order (log.retention.ms before .minutes before
        .hours); otherwise the first synonym with a built-in default supplies it.
        """
        synonyms = BROKER_SYNONYMS.get(topic_config, ())
        for explicit in (True, False):
            for synonym in synonyms:
                value, source = self.source_of(synonym)
                if value is None or (source != ConfigSource.DEFAULT_CONFIG) != explicit:
                    continue
                return ResolvedValue(value * UNIT_FACTORS.get(synonym, 1), source, synonym)
        return ResolvedValue(TOPIC_CONFIGS[topic_config].default, ConfigSource.DEFAULT_CONFIG)

    def topic_defaults(self) -> dict[str, Any]:
        return {name: self.topic_default(name).value for name in TOPIC_CONFIGS.names()}


def parse_listener(spec: str) -> tuple[str, str, int]:
    """'PLAINTEXT://host:9092' -> ('PLAINTEXT', 'host', 9092)."""
    try:
        name, rest = spec.split("://", 1)
        host, port = rest.rsplit(":", 1)
        return name.upper(), host.strip("[]"), int(port)
    except ValueError:
        raise ConfigError(f"Invalid listener {spec!r}: expected NAME://host:port") from None


def read_properties(path: Path) -> dict[str, str]:
    """Java .properties subset: key=value or key:value lines, # and ! comments, \\ continuations."""
    out: dict[str, str] = {}
    pending = ""
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped[0] in "#!"):
            continue
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            pending += stripped[:-1]
            continue
        stripped, pending = pending + stripped, ""
        for i, ch in enumerate(stripped):
            if ch in "=:":
                key, value = stripped[:i].strip(), stripped[i + 1 :].strip()
                break
        else:
            key, value = stripped, ""
        if key:
            out[key] = value
    return out
