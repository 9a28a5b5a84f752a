"""Metadata: brokers, topics by name and id, auto-creation and its refusals."""

from __future__ import annotations

import uuid

import pytest
from tests.unit.broker.handlers.loop_probe import run_beside_a_ticker

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode


def _metadata(h, topics, version: int = 12, allow_auto: bool = True):
    body = {"topics": None if topics is None else [
        {"name": t} if isinstance(t, str) or t is None else {"name": None, "topic_id": t}
        for t in topics], "allow_auto_topic_creation": allow_auto}
    return h.request(ApiKey.METADATA, version, body)


def test_all_topics_with_brokers_and_controller(broker_harness) -> None:
    h = broker_harness
    h.create_topic("a", partitions=2)
    h.create_topic("b")
    r = _metadata(h, None)
    assert [(b.node_id, b.host) for b in r.brokers] == [(1, "127.0.0.1")]
    assert r.controller_id == 1
    assert r.cluster_id == h.broker.cluster_id
    topics = {t.name: t for t in r.topics}
    assert set(topics) == {"a", "b"}
    a = topics["a"]
    assert (a.error_code, a.topic_id, a.is_internal) == (0, h.topic_id("a"), False)
    assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes)
            for p in a.partitions] == [(0, 1, [1], [1]), (1, 1, [1], [1])]


def test_an_empty_list_means_no_topics(broker_harness) -> None:
    broker_harness.create_topic("a")
    assert _metadata(broker_harness, []).topics == []


def test_v0_empty_list_means_all_topics(broker_harness) -> None:
    # v0 has no null array: an empty list asks for every topic
    broker_harness.create_topic("a")
    r = broker_harness.request(ApiKey.METADATA, 0, {"topics": []})
    assert [t.name for t in r.topics] == ["a"]


@pytest.mark.parametrize("version", [1, 4, 9, 10, 12, 13])
def test_every_version_round_trips(broker_harness, version: int) -> None:
    broker_harness.create_topic("a")
    r = _metadata(broker_harness, ["a"], version=version)
    assert [(t.name, t.error_code) for t in r.topics] == [("a", 0)]


def test_the_offsets_topic_is_internal(broker_harness) -> None:
    h = broker_harness
    h.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]})
    (t,) = _metadata(h, ["__consumer_offsets"]).topics
    assert (t.error_code, t.is_internal) == (0, True)


def test_an_unknown_topic_is_auto_created(broker_harness) -> None:
    # Kafka's broker answers LEADER_NOT_AVAILABLE until the controller created the topic;
    # a single Strom node creates it at once and answers with it
    (t,) = _metadata(broker_harness, ["fresh"]).topics
    assert (t.name, t.error_code, len(t.partitions)) == ("fresh", 0, 1)
    assert "fresh" in broker_harness.broker.image.topics


def test_no_auto_creation_when_the_client_asks_not_to(broker_harness) -> None:
    (t,) = _metadata(broker_harness, ["fresh"], allow_auto=False).topics
    assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert "fresh" not in broker_harness.broker.image.topics


@pytest.mark.broker_config(**{"auto.create.topics.enable": "false"})
def test_no_auto_creation_when_disabled(broker_harness) -> None:
    (t,) = _metadata(broker_harness, ["fresh"]).topics
    assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert "fresh" not in broker_harness.broker.image.topics


@pytest.mark.broker_config(**{"num.partitions": "3"})
def test_auto_creation_uses_num_partitions(broker_harness) -> None:
    (t,) = _metadata(broker_harness, ["fresh"]).topics
    assert len(t.partitions) == 3


def test_auto_creating_an_illegal_name_is_invalid_topic(broker_harness) -> None:
    (t,) = _metadata(broker_harness, ["bad name"]).topics
    assert t.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert t.partitions == []


def test_a_topic_by_id(broker_harness) -> None:
    h = broker_harness
    h.create_topic("a")
    (t,) = _metadata(h, [h.topic_id("a")]).topics
    assert (t.name, t.error_code) == ("a", 0)


def test_an_unknown_topic_id_is_unknown_topic_id(broker_harness) -> None:
    unknown = uuid.uuid4()
    (t,) = _metadata(broker_harness, [unknown]).topics
    assert (t.error_code, t.topic_id, t.name) == (ErrorCode.UNKNOWN_TOPIC_ID, unknown, None)


def test_the_answer_follows_topic_changes(broker_harness) -> None:
    # per-topic entries are cached: a change must not leave a stale entry behind
    h = broker_harness
    h.create_topic("a")
    assert len(_metadata(h, ["a"]).topics[0].partitions) == 1
    h.request(ApiKey.CREATE_PARTITIONS, 3, {"topics": [{"name": "a", "count": 2,
                                                        "assignments": None}], "timeout": 5000})
    assert len(_metadata(h, ["a"]).topics[0].partitions) == 2
    h.request(ApiKey.DELETE_TOPICS, 5, {"topic_names": ["a"], "timeout": 5000})
    (t,) = _metadata(h, ["a"], allow_auto=False).topics
    assert t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# -- requests with many names: Kafka's set semantics, its creation cap, a loop shared ---------


def test_a_name_or_id_asked_twice_is_answered_once(broker_harness) -> None:
    # Kafka (KafkaApis.handleTopicMetadataRequest) puts the names and ids in sets: a name
    # repeated 1,000 times must not make a 1,000-fold response
    h = broker_harness
    h.create_topic("a", partitions=3)
    r = _metadata(h, ["a", "a", h.topic_id("a"), "a", h.topic_id("a")], allow_auto=False)
    assert [t.name for t in r.topics] == ["a", "a"]  # once by name, once by id


@pytest.mark.broker_config(**{"num.partitions": "5000"})
def test_auto_creating_more_than_10000_partitions_creates_none(broker_harness) -> None:
    # Kafka sends the new names to its controller as one CreateTopics, which refuses more than
    # 10,000 partitions in all (POLICY_VIOLATION); Metadata answers UNKNOWN_TOPIC_OR_PARTITION
    h = broker_harness
    r = _metadata(h, ["n1", "n2", "n3"])
    assert {(t.name, t.error_code) for t in r.topics} == {
        (n, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for n in ("n1", "n2", "n3")}
    assert not {"n1", "n2", "n3"} & set(h.broker.image.topics)


@pytest.mark.broker_config(**{"num.partitions": "4000"})
def test_invalid_names_do_not_count_towards_the_cap(broker_harness) -> None:
    h = broker_harness  # 2 valid names: 8,000 partitions; the 3 invalid ones are not sent
    r = _metadata(h, ["ok1", "bad name", "ok2", "bad!", "bad?"])
    codes = {t.name: t.error_code for t in r.topics}
    assert codes == {"ok1": 0, "ok2": 0, "bad name": ErrorCode.INVALID_TOPIC_EXCEPTION,
                     "bad!": ErrorCode.INVALID_TOPIC_EXCEPTION,
                     "bad?": ErrorCode.INVALID_TOPIC_EXCEPTION}
    assert len(h.broker.image.topics["ok2"].partitions) == 4000


def test_auto_creating_many_topics_shares_the_loop(broker_harness) -> None:
    # each creation costs a metadata record and a log: 300 of them in one request must not
    # hold every other client until the last is made
    h = broker_harness
    shared = run_beside_a_ticker(h, ApiKey.METADATA, 12, {
        "topics": [{"name": f"auto{i}"} for i in range(300)], "allow_auto_topic_creation": True})
    assert [t.error_code for t in shared.response.topics] == [0] * 300
    assert len(h.broker.image.topics) >= 300
    assert shared.sliced, shared
