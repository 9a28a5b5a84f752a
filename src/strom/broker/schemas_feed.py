"""`_schemas-0` fetched from its leader for this broker's registry follower.

A plain consumer fetch (replica id -1, so up to the high watermark: committed records only) over
the inter-broker listener with its security, the way replica fetchers reach the leader. The
leader is looked up in the metadata image on every fetch, so a moved leadership is followed.
"""

from __future__ import annotations

import logging

from strom.broker.core import Node
from strom.cluster.client import BrokerClients, BrokerConnectionError
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, ProtocolError
from strom.registry.follower import Fetched
from strom.registry.state import SCHEMAS_TOPIC

log = logging.getLogger("strom.registry")

FETCH_VERSION = 13
MAX_WAIT_MS = 200  # how long a fetch waits for new records: bounds a sync's wait
MAX_BYTES = 4 * 1024 * 1024
CONSUMER = -1  # not a replica: the leader answers up to its high watermark


class SchemasFeed:
    def __init__(self, node: Node) -> None:
        self.node = node
        self._clients = BrokerClients(f"strom-registry-{node.broker_id}",
                                      timeout_s=node.config.get("replica.socket.timeout.ms")
                                      / 1000, security=node.inter_broker)

    def _leader(self) -> int:
        topic = self.node.image.topics.get(SCHEMAS_TOPIC)
        state = topic.partitions.get(0) if topic is not None else None
        return state.leader if state is not None else -1

    def leader_elsewhere(self) -> bool:
        leader = self._leader()
        return leader >= 0 and leader != self.node.broker_id \
            and leader in self.node.image.brokers

    async def fetch(self, offset: int) -> Fetched | None:
        image = self.node.image
        topic = image.topics.get(SCHEMAS_TOPIC)
        state = topic.partitions.get(0) if topic is not None else None
        info = image.brokers.get(state.leader) if state is not None else None
        if topic is None or state is None or info is None:
            return None
        request = {
            "replica_id": CONSUMER, "max_wait": MAX_WAIT_MS, "min_bytes": 1,
            "max_bytes": MAX_BYTES, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic_id": topic.topic_id, "partitions": [{
                "partition": 0, "current_leader_epoch": state.leader_epoch,
                "fetch_offset": offset, "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": MAX_BYTES}]}],
            "forgotten_topics_data": [], "rack_id": "",
        }
        client = self._clients.get(state.leader, info.host, info.port)
        try:
            response = await client.request(ApiKey.FETCH, FETCH_VERSION, request)
        except (BrokerConnectionError, ProtocolError) as exc:
            log.debug("schema registry: fetching %s from broker %d: %s", SCHEMAS_TOPIC,
                      state.leader, exc)
            return None
        for t in response.responses:
            for r in t.partitions:
                if r.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    return Fetched(None, r.high_watermark, r.log_start_offset, out_of_range=True)
                if r.error_code:
                    log.debug("schema registry: fetching %s from broker %d: %s", SCHEMAS_TOPIC,
                              state.leader, ErrorCode(r.error_code).name)
                    return None
                return Fetched(r.records, r.high_watermark, r.log_start_offset)
        return None

    async def close(self) -> None:
        self._clients.close()
