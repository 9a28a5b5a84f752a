"""Topic creation from the harness, through confluent-kafka's AdminClient."""

from __future__ import annotations

import time
from collections.abc import Mapping

from bench.brokers import topic_ready

# Kafka's controller refuses a request that makes more than max.records.per.user.op (10,000)
# metadata records, one per partition plus the topic's (POLICY_VIOLATION): a broker that says
# so gets the topic in steps instead, CreateTopics and then CreatePartitions, as a Kafka user
# would do it. Tansu has no CreatePartitions, so the steps are only taken when needed.
PARTITIONS_PER_REQUEST = 5_000


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int,
    timeout: float = 60.0,
    security: Mapping[str, str] | None = None,
    replication: int = 1,
    config: dict[str, str] | None = None,
) -> float:
    """Create ``name`` (``replication`` replicas per partition, topic ``config``) and wait until
    Metadata shows every partition with a leader.

    ``security`` holds the client settings of the broker's listener besides bootstrap.servers
    (:attr:`bench.brokers.BrokerProcess.security`: SSL's, or none). Returns the seconds from the
    request to that point.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **(security or {}), "log_level": 0})
    t0 = time.monotonic()
    deadline = t0 + timeout
    def create(count: int) -> None:
        fut = admin.create_topics(
            [NewTopic(name, count, replication, config=config or {})],
            request_timeout=timeout, operation_timeout=timeout,
        )[name]
        fut.result(timeout=timeout)

    first = partitions
    try:
        create(partitions)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.POLICY_VIOLATION or partitions <= PARTITIONS_PER_REQUEST:
            raise
        first = PARTITIONS_PER_REQUEST
        create(first)
    for total in range(first + PARTITIONS_PER_REQUEST, partitions + PARTITIONS_PER_REQUEST,
                       PARTITIONS_PER_REQUEST):  # fmt: skip
        grow = admin.create_partitions([NewPartitions(name, min(total, partitions))],
                                       request_timeout=timeout, operation_timeout=timeout)
        grow[name].result(timeout=max(1.0, deadline - time.monotonic()))
    while True:
        try:
            md = admin.list_topics(name, timeout=max(0.1, min(10.0, deadline - time.monotonic())))
            if topic_ready(md, (name, partitions)):
                return time.monotonic() - t0
        except KafkaException:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name} with {partitions} partitions not ready in {timeout}s")
        time.sleep(0.05)
