"""A streams topology against the topics (Kafka's InternalTopicManager): task counts, inferred
partition counts of internal topics, copartitioning, and what is missing."""

from __future__ import annotations

import uuid

import pytest

from strom.coordinator.group.streams_state import (
    CopartitionGroup,
    StreamsTopology,
    Subtopology,
    TopicInfo,
)
from strom.coordinator.group.streams_topology import Status, configure, metadata_hash, validate
from strom.protocol.errors import ErrorCode, KafkaError


class Topics:
    def __init__(self, **counts: int) -> None:
        self.t = {name.replace("_", "-"): (uuid.uuid4(), n) for name, n in counts.items()}

    def topic(self, name: str):
        return self.t.get(name)

    def names(self):
        return list(self.t)


def word_count(sink_partitions: int = 0) -> StreamsTopology:
    """Kafka Streams' word count: split and regroup (0), then count (1)."""
    return StreamsTopology(1, (
        Subtopology("0", source_topics=("lines",), repartition_sink_topics=("app-words-repartition",)),
        Subtopology("1", repartition_source_topics=(
            TopicInfo("app-words-repartition", sink_partitions, 0,
                      (("cleanup.policy", "delete"),)),),
            state_changelog_topics=(TopicInfo("app-counts-changelog", 0, 0,
                                              (("cleanup.policy", "compact"),)),)),
    ))


def test_tasks_are_the_largest_source_partition_count_and_internal_topics_follow() -> None:
    c = configure(word_count(), Topics(lines=4))
    assert c.task_counts == {"0": 4, "1": 4}
    assert c.internal_partitions == {"app-words-repartition": 4, "app-counts-changelog": 4}
    assert c.status is not None and c.status[0] == Status.MISSING_INTERNAL_TOPICS
    created = {t.name: (t.partitions, t.replication_factor, t.configs) for t in c.to_create}
    assert created == {"app-words-repartition": (4, -1, {"cleanup.policy": "delete"}),
                       "app-counts-changelog": (4, -1, {"cleanup.policy": "compact"})}
    assert not c.ready


def test_ready_once_internal_topics_exist() -> None:
    topics = Topics(lines=4)
    topics.t["app-words-repartition"] = (uuid.uuid4(), 4)
    topics.t["app-counts-changelog"] = (uuid.uuid4(), 4)
    c = configure(word_count(), topics)
    assert c.ready and not c.to_create
    assert c.source_topics == {"0": ["lines"], "1": ["app-words-repartition"]}


def test_a_fixed_repartition_count_wins() -> None:
    c = configure(word_count(sink_partitions=2), Topics(lines=4))
    assert c.task_counts == {"0": 4, "1": 2}
    assert c.internal_partitions["app-counts-changelog"] == 2


def test_repartition_count_is_inferred_through_a_chain() -> None:
    topology = StreamsTopology(0, (
        Subtopology("0", source_topics=("a", "b"), repartition_sink_topics=("r1",)),
        Subtopology("1", repartition_source_topics=(TopicInfo("r1"),),
                    repartition_sink_topics=("r2",)),
        Subtopology("2", repartition_source_topics=(TopicInfo("r2"),)),
    ))
    c = configure(topology, Topics(a=3, b=5))
    assert c.task_counts == {"0": 5, "1": 5, "2": 5}


def test_missing_source_topics() -> None:
    c = configure(word_count(), Topics())
    assert c.status == (Status.MISSING_SOURCE_TOPICS, "Source topics lines are missing.")
    assert c.task_counts == {} and not c.to_create


def test_copartitioned_sources_must_agree() -> None:
    topology = StreamsTopology(0, (
        Subtopology("0", source_topics=("orders", "customers"),
                    copartition_groups=(CopartitionGroup(source_topics=(0, 1)),)),))
    assert configure(topology, Topics(orders=4, customers=4)).ready
    c = configure(topology, Topics(orders=4, customers=3))
    assert c.status is not None and c.status[0] == Status.INCORRECTLY_PARTITIONED_TOPICS
    assert "customers(3)" in c.status[1] and "orders(4)" in c.status[1]


def test_a_flexible_repartition_topic_takes_its_copartitioned_count() -> None:
    topology = StreamsTopology(0, (
        Subtopology("0", source_topics=("big",), repartition_sink_topics=("r",)),
        Subtopology("1", source_topics=("small",), repartition_source_topics=(TopicInfo("r"),),
                    copartition_groups=(CopartitionGroup(source_topics=(0,),
                                                         repartition_source_topics=(0,)),)),
    ))
    c = configure(topology, Topics(big=8, small=2))
    assert c.internal_partitions["r"] == 2
    assert c.task_counts == {"0": 8, "1": 2}


def test_an_existing_internal_topic_with_other_partitions_is_reported() -> None:
    topics = Topics(lines=4)
    topics.t["app-counts-changelog"] = (uuid.uuid4(), 3)
    c = configure(word_count(), topics)
    assert c.status is not None and c.status[0] == Status.INCORRECTLY_PARTITIONED_TOPICS
    assert "app-counts-changelog" in c.status[1]


def test_regex_sources_are_matched() -> None:
    topology = StreamsTopology(0, (Subtopology("0", source_topic_regex=("in-.*",)),))
    c = configure(topology, Topics(in_a=2, in_b=3, other=9))
    assert c.ready and c.task_counts == {"0": 3}
    assert configure(topology, Topics(other=1)).status[0] == Status.MISSING_SOURCE_TOPICS


def test_metadata_hash_changes_with_partition_counts() -> None:
    topics = Topics(lines=4)
    before = metadata_hash(word_count(), topics)
    assert metadata_hash(word_count(), topics) == before
    topics.t["lines"] = (topics.t["lines"][0], 6)
    assert metadata_hash(word_count(), topics) != before


@pytest.mark.parametrize("topology, message", [
    (StreamsTopology(0, (Subtopology("0", ("a",)), Subtopology("0", ("b",)))), "Duplicate"),
    (StreamsTopology(0, (Subtopology("0"),)), "no source topics"),
    (StreamsTopology(0, (Subtopology("0", ("a",), state_changelog_topics=(
        TopicInfo("c", 3),)),)), "undefined partition count"),
    (StreamsTopology(0, (Subtopology("0", repartition_source_topics=(TopicInfo("x"),)),)),
     "never used as a sink topic"),
    (StreamsTopology(0, (Subtopology("0", ("a",), copartition_groups=(
        CopartitionGroup(source_topics=(3,)),)),)), "does not exist"),
    (StreamsTopology(0, (Subtopology("0", ("a",), state_changelog_topics=(
        TopicInfo("bad name"),)),)), "not a valid topic name"),
])
def test_invalid_topologies(topology: StreamsTopology, message: str) -> None:
    with pytest.raises(KafkaError) as exc:
        validate(topology)
    assert exc.value.code == ErrorCode.STREAMS_INVALID_TOPOLOGY
    assert message in (exc.value.message or "")


def test_word_count_is_valid() -> None:
    validate(word_count())
    # Kafka accepts a sink no subtopology reads, and a fixed repartition topic nobody writes
    validate(StreamsTopology(0, (Subtopology("0", ("a",), repartition_sink_topics=("x",)),)))
    validate(StreamsTopology(0, (Subtopology("0", repartition_source_topics=(TopicInfo("x", 2),)),)))
