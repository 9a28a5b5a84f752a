"""Local replicas: keeps the partition logs on this broker in step with the metadata image.

Kafka's ReplicaManager in miniature: it creates a log for every partition this broker hosts,
removes logs of deleted topics, pushes config changes into the logs, and wakes fetch waiters on
every append. Handlers go through it, never to the LogManager directly.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from strom.cluster.image import METADATA_TOPIC, MetadataImage, PartitionState, TopicState
from strom.cluster.records import Change
from strom.common.waiters import WaiterRegistry
from strom.config.broker import BrokerConfig
from strom.config.defs import ConfigSource
from strom.config.topic import TOPIC_CONFIGS, ResolvedValue
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog
from strom.storage.manager import LogManager

log = logging.getLogger(__name__)

# (topic, partition, is_leader, leader_epoch): called when this broker starts or stops leading
LeadershipListener = Callable[[str, int, bool, int], None]

_LOG_CONFIG_FIELDS = [f.name for f in dataclasses.fields(LogConfig)]


class PartitionManager:
    def __init__(self, broker_id: int, config: BrokerConfig, image: MetadataImage,
                 logs: LogManager) -> None:
        self.broker_id = broker_id
        self.config = config
        self.image = image
        self.logs = logs
        self.waiters = WaiterRegistry()
        self._local: dict[tuple[str, int], PartitionLog] = {}
        self._leading: dict[tuple[str, int], int] = {}  # partitions we lead -> leader epoch
        self._leadership_listeners: list[LeadershipListener] = []

    # -- configs --------------------------------------------------------------------------

    def resolve(self, topic: TopicState, name: str) -> ResolvedValue:
        """Effective value of a topic config: the topic's override, else the broker default."""
        if name in topic.configs:
            return ResolvedValue(TOPIC_CONFIGS.parse(name, topic.configs[name]),
                                 ConfigSource.DYNAMIC_TOPIC_CONFIG, name)
        return self.config.topic_default(name)

    def log_config(self, topic: TopicState) -> LogConfig:
        values: dict[str, Any] = {}
        for field in _LOG_CONFIG_FIELDS:
            name = field.replace("_", ".")
            if name not in TOPIC_CONFIGS:
                continue
            value = self.resolve(topic, name).value
            if isinstance(value, list):
                value = ",".join(value)
            values[field] = value
        return LogConfig(**values)

    # -- reconciliation -------------------------------------------------------------------

    def sync_all(self) -> None:
        """Bring local logs in line with the whole image (start-up)."""
        wanted = set()
        for topic in self.image.topics.values():
            config = self.log_config(topic)
            for p in topic.partitions.values():
                if self.broker_id in p.replicas:
                    wanted.add((topic.name, p.partition))
                    self._ensure(topic, p, config)
        for partition_log in list(self.logs.logs()):
            key = (partition_log.topic, partition_log.partition)
            if partition_log.topic == METADATA_TOPIC:
                continue
            topic = self.image.topics.get(partition_log.topic)
            if key not in wanted or topic is None or topic.topic_id != partition_log.topic_id:
                log.info("removing stray log %s-%d", *key)
                self.logs.delete_partition(*key)
                self._local.pop(key, None)
        for key in list(self._leading.keys() | self._local.keys()):
            self._update_leadership(*key)

    def on_changes(self, changes: list[Change]) -> None:
        configs: dict[str, LogConfig] = {}  # a new topic brings one change per partition
        for change in changes:
            topic = change.topic
            if change.kind == "topic_deleted" and topic is not None:
                for p in change.partitions:
                    self._local.pop((topic.name, p), None)
                    self._update_leadership(topic.name, p)
                    if self.logs.get(topic.name, p) is not None:
                        self.logs.delete_partition(topic.name, p)
                    self.waiters.notify((topic.name, p))
            elif change.kind in ("partitions_created", "partition_changed") and topic is not None:
                config = configs.get(topic.name)
                if config is None:
                    config = configs[topic.name] = self.log_config(topic)
                for p in change.partitions:
                    state = topic.partitions[p]
                    if self.broker_id in state.replicas:
                        self._ensure(topic, state, config)
                    elif (topic.name, p) in self._local:
                        self._drop(topic, p)  # reassigned away from this broker
                    self._update_leadership(topic.name, p)
            elif change.kind == "topic_configs" and topic is not None:
                config = configs[topic.name] = self.log_config(topic)
                for p in topic.partitions:
                    partition_log = self._local.get((topic.name, p))
                    if partition_log is not None:
                        partition_log.update_config(config)
            elif change.kind == "broker_configs":
                self.refresh_dynamic_broker_configs()
                configs.clear()

    def refresh_dynamic_broker_configs(self) -> None:
        from strom.config.broker import BROKER_CONFIGS

        def parsed(layer: dict[str, str]) -> dict[str, Any]:
            return {k: BROKER_CONFIGS.parse(k, v) for k, v in layer.items() if k in BROKER_CONFIGS}

        self.config.dynamic_default = parsed(self.image.broker_configs.get("", {}))
        self.config.dynamic_broker = parsed(self.image.broker_configs.get(str(self.broker_id), {}))
        for topic in self.image.topics.values():
            config = self.log_config(topic)
            for p in topic.partitions:
                partition_log = self._local.get((topic.name, p))
                if partition_log is not None:
                    partition_log.update_config(config)

    def _drop(self, topic: TopicState, partition: int) -> None:
        """This broker is no longer a replica: delete its copy (Kafka's StopReplica with
        deletion); readers waiting on it wake and find it gone."""
        key = (topic.name, partition)
        partition_log = self._local.pop(key)
        if partition_log.topic_id == topic.topic_id:
            log.info("%s-%d is no longer assigned to broker %d: deleting its log", *key,
                     self.broker_id)
        self.logs.delete_partition(*key)
        self.waiters.notify(key)

    def _ensure(self, topic: TopicState, state: PartitionState, config: LogConfig) -> None:
        key = (topic.name, state.partition)
        existing = self._local.get(key)
        if existing is not None and existing.topic_id == topic.topic_id:
            return
        self._local[key] = self.logs.create(topic.name, state.partition, topic.topic_id, config)

    # -- leadership (for coordinators) -------------------------------------------------------

    def add_leadership_listener(self, listener: LeadershipListener, *, replay: bool = True) -> None:
        """Tell `listener` whenever this broker starts or stops leading a local partition.

        With `replay`, it first hears about every partition led right now (on one broker: all
        local partitions). A replicated cluster calls the same listeners from its leader changes.
        """
        self._leadership_listeners.append(listener)
        if replay:
            for (topic, partition), epoch in list(self._leading.items()):
                listener(topic, partition, True, epoch)

    def _update_leadership(self, topic_name: str, partition: int) -> None:
        key = (topic_name, partition)
        t = self.image.topics.get(topic_name)
        state = t.partitions.get(partition) if t is not None else None
        leads = (state is not None and state.leader == self.broker_id and key in self._local)
        was = self._leading.get(key)
        if leads:
            assert state is not None
            if was == state.leader_epoch:
                return
            self._leading[key] = state.leader_epoch
            for listener in list(self._leadership_listeners):
                listener(topic_name, partition, True, state.leader_epoch)
        elif was is not None:
            del self._leading[key]
            for listener in list(self._leadership_listeners):
                listener(topic_name, partition, False, was)

    # -- lookups --------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._local.get((topic, partition))

    def leader_epoch(self, topic: str, partition: int) -> int:
        t = self.image.topics.get(topic)
        p = t.partitions.get(partition) if t else None
        return p.leader_epoch if p else -1
