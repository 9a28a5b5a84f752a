"""Replication wiring for a broker in a cluster: builds the ReplicaManager from the broker's
config and runs its periodic work (ISR checks, high-watermark checkpoints)."""

from __future__ import annotations

import asyncio
import logging

from strom.broker.core import Node
from strom.cluster.replication.fetcher import FetcherSettings
from strom.cluster.replication.manager import ReplicaManager
from strom.cluster.replication.throttle import FOLLOWER, LEADER, ReplicationThrottle

log = logging.getLogger(__name__)


def build_replica_manager(node: Node) -> ReplicaManager:
    config = node.config
    settings = FetcherSettings(
        broker_id=node.broker_id,
        max_wait_ms=config.get("replica.fetch.wait.max.ms"),
        min_bytes=config.get("replica.fetch.min.bytes"),
        max_bytes=config.get("replica.fetch.response.max.bytes"),
        partition_max_bytes=config.get("replica.fetch.max.bytes"),
        backoff_ms=config.get("replica.fetch.backoff.ms"),
        socket_timeout_ms=config.get("replica.socket.timeout.ms"),
        security=node.inter_broker,
    )

    def min_isr_for(topic_name: str) -> int:
        topic = node.image.topics.get(topic_name)
        if topic is None:
            return 1
        return int(node.partitions.resolve(topic, "min.insync.replicas").value)

    window = {"samples": config.get("replication.quota.window.num"),
              "window_s": config.get("replication.quota.window.size.seconds")}
    replicas = ReplicaManager(
        node.broker_id, node.image, node.controller, node.partitions.get,
        node.partitions.waiters, settings, lag_max_ms=config.get("replica.lag.time.max.ms"),
        min_isr_for=min_isr_for,
        # the rates are dynamic broker configs: read again whenever the image changes
        leader_throttle=ReplicationThrottle(
            LEADER, node.broker_id, node.image,
            lambda: config.get("leader.replication.throttled.rate"), **window),
        follower_throttle=ReplicationThrottle(
            FOLLOWER, node.broker_id, node.image,
            lambda: config.get("follower.replication.throttled.rate"), **window),
        ready_log=node.partitions.ready)
    node.partitions.add_created_listener(replicas.on_log_created)
    return replicas


async def run_replication(replicas: ReplicaManager, node: Node) -> None:
    """Start replication and run its periodic work until cancelled."""
    config = node.config
    replicas.start()
    isr_interval = max(config.get("replica.lag.time.max.ms") / 2, 10) / 1000
    checkpoint_interval = max(config.get("replica.high.watermark.checkpoint.interval.ms"), 10) / 1000
    loop = asyncio.get_running_loop()
    next_checkpoint = loop.time() + checkpoint_interval
    try:
        while True:
            await asyncio.sleep(min(isr_interval, checkpoint_interval))
            try:
                replicas.check_isr()
                if loop.time() >= next_checkpoint:
                    await node.logs.checkpoint_in_background()
                    next_checkpoint = loop.time() + checkpoint_interval
            except Exception:
                log.exception("replication housekeeping failed")
    finally:
        await replicas.shutdown()
