"""What the broker counts as it works: per topic and per request, never per record.

One `BrokerStats` per broker, updated on the event loop only. With metrics off
(``metrics.listener`` empty) the broker has none and counts nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strom.metrics.primitives import Histogram

# one request's phases, as Kafka's RequestMetrics splits them
PHASES = ("requestqueuetimems", "localtimems", "remotetimems", "responsesendtimems",
          "totaltimems")


class TopicStats:
    """Kafka's BrokerTopicMetrics for one topic (MessagesInPerSec, BytesInPerSec, ...)."""

    __slots__ = (
        "bytes_in",
        "bytes_out",
        "failed_produce_requests",
        "fetch_requests",
        "messages_in",
        "produce_requests",
        "replication_bytes_out",
    )

    def __init__(self) -> None:
        self.messages_in = self.bytes_in = self.bytes_out = self.replication_bytes_out = 0
        self.produce_requests = self.fetch_requests = self.failed_produce_requests = 0

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


class ApiStats:
    """One API's request count per version and phase times (the requests now waiting are
    read from the connections when scraped: `BrokerServer.waiting_requests`)."""

    __slots__ = ("phases", "requests")

    def __init__(self) -> None:
        self.requests: dict[int, int] = {}
        self.phases = tuple(Histogram() for _ in PHASES)


@dataclass
class BrokerStats:
    topics: dict[str, TopicStats] = field(default_factory=dict)
    apis: dict[int, ApiStats] = field(default_factory=dict)
    connections_created: dict[str, int] = field(default_factory=dict)  # per listener

    def topic(self, name: str) -> TopicStats:
        stats = self.topics.get(name)
        if stats is None:
            stats = self.topics[name] = TopicStats()
        return stats

    def produced(self, topic: str, messages: int, size: int) -> None:
        t = self.topic(topic)
        t.messages_in += messages
        t.bytes_in += size
        t.produce_requests += 1

    def produce_failed(self, topic: str) -> None:
        t = self.topic(topic)
        t.produce_requests += 1
        t.failed_produce_requests += 1

    def fetched(self, topic: str, size: int) -> None:
        t = self.topic(topic)
        t.bytes_out += size
        t.fetch_requests += 1

    def replicated_out(self, topic: str, size: int) -> None:
        self.topic(topic).replication_bytes_out += size

    def api(self, api_key: int) -> ApiStats:
        stats = self.apis.get(api_key)
        if stats is None:
            stats = self.apis[api_key] = ApiStats()
        return stats

    def request_done(self, api_key: int, version: int, queue_s: float, local_s: float,
                     remote_s: float, send_s: float) -> None:
        """One request's phases, in seconds (reported in milliseconds, as Kafka's)."""
        api = self.api(api_key)
        api.requests[version] = api.requests.get(version, 0) + 1
        queue, local, remote, send, total = api.phases
        queue.observe(queue_s * 1000)
        local.observe(local_s * 1000)
        remote.observe(remote_s * 1000)
        send.observe(send_s * 1000)
        total.observe((queue_s + local_s + remote_s + send_s) * 1000)

    def forget_topic(self, name: str) -> None:
        self.topics.pop(name, None)
