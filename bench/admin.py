"""Topic creation from the harness, through confluent-kafka's AdminClient."""

from __future__ import annotations

import time

from bench.brokers import topic_ready


def create_topic(bootstrap: str, name: str, partitions: int, timeout: float = 60.0) -> float:
    """Create ``name`` and wait until Metadata shows every partition with a leader.

    Returns the seconds from the request to that point.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    t0 = time.monotonic()
    deadline = t0 + timeout
    fut = admin.create_topics(
        [NewTopic(name, partitions, 1)], request_timeout=timeout, operation_timeout=timeout
    )[name]
    fut.result(timeout=timeout)
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
