"""Option parsing of the strom Spark source and sink: Spark's Kafka rules, names and defaults."""

from __future__ import annotations

import pytest

from strom.spark.options import (
    AT_LEAST_ONCE,
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    EARLIEST,
    EXACTLY_ONCE,
    LATEST,
    NATIVE_SASL_MECHANISMS,
    StromOptionError,
    librdkafka_config,
    native_reader_unsupported,
    parse_partition_offsets_json,
    parse_partitions_json,
    parse_sink_options,
    parse_source_options,
    parse_time_ms,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def src(streaming: bool = True, **opts: str):
    return parse_source_options({**BOOT, **opts}, streaming=streaming)


def test_defaults_follow_spark():
    s = src(subscribe="a, b ,")
    assert s.subscription.kind == "subscribe"
    assert s.subscription.topics == ("a", "b")
    assert s.starting.kind == "latest"  # streaming default
    assert s.fail_on_data_loss is True
    assert s.include_headers is False
    assert s.max_offsets_per_trigger is None
    assert s.max_trigger_delay_ms == DEFAULT_MAX_TRIGGER_DELAY_MS
    assert s.poll_timeout_ms == 120_000
    assert s.group_id_prefix == "spark-kafka-source"
    b = src(streaming=False, subscribe="a")
    assert b.starting.kind == "earliest" and b.ending.kind == "latest"
    assert b.group_id_prefix == "spark-kafka-relation"


def test_option_names_are_case_insensitive():
    s = parse_source_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SubscribePattern": "t.*",
                              "STARTINGOFFSETS": "earliest", "maxOffsetsPerTrigger": "10"},
                             streaming=True)
    assert s.subscription.kind == "subscribepattern"
    assert s.bootstrap_servers == "h:1"
    assert s.starting.kind == "earliest"
    assert s.max_offsets_per_trigger == 10


@pytest.mark.parametrize("opts, message", [
    ({}, "One of the following options must be specified"),
    ({"subscribe": "a", "assign": '{"a":[0]}'}, "Only one of the following options"),
    ({"subscribe": " , "}, "No topics to subscribe to"),
    ({"subscribePattern": "  "}, "Pattern to subscribe is empty"),
    ({"assign": "a:0"}, "No topicpartitions to assign"),
    ({"assign": '{"a":"x"}'}, "Expected e.g."),
    ({"subscribe": "a", "minPartitions": "0"}, "minPartitions must be positive"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "-1"}, "maxOffsetsPerTrigger must be positive"),
    ({"subscribe": "a", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"},
     "minOffsetPerTrigger(10) is higher"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, "'true' or 'false'"),
    ({"subscribe": "a", "endingOffsets": "latest"}, "ending offset not valid in streaming"),
    ({"subscribe": "a", "endingTimestamp": "5"}, "ending timestamp not valid in streaming"),
    ({"subscribe": "a", "startingTimestamp": "soon"}, "Expected a single long value"),
])
def test_invalid_stream_options(opts, message):
    with pytest.raises(StromOptionError) as e:
        src(**opts)
    assert message in str(e.value)


@pytest.mark.parametrize("key", [
    "kafka.auto.offset.reset", "kafka.key.deserializer", "kafka.value.deserializer",
    "kafka.enable.auto.commit", "kafka.interceptor.classes",
])
def test_client_settings_spark_rejects_are_rejected(key):
    with pytest.raises(StromOptionError) as e:
        parse_source_options({**BOOT, "subscribe": "a", key: "x"}, streaming=True)
    assert key.removeprefix("kafka.") in str(e.value)


def test_bootstrap_servers_required():
    with pytest.raises(StromOptionError, match=r"kafka\.bootstrap\.servers"):
        parse_source_options({"subscribe": "a"}, streaming=True)


def test_group_id_is_allowed_with_a_warning(caplog):
    s = src(subscribe="a", **{"kafka.group.id": "mine"})
    assert s.kafka["group.id"] == "mine"
    assert "not recommended" in caplog.text


def test_batch_offset_rules():
    with pytest.raises(StromOptionError, match="can't be latest for batch"):
        src(streaming=False, subscribe="a", startingOffsets="latest")
    with pytest.raises(StromOptionError, match="can't be latest for batch"):
        src(streaming=False, subscribe="a", startingOffsets='{"a":{"0":-1}}')
    with pytest.raises(StromOptionError, match="can't be earliest for batch"):
        src(streaming=False, subscribe="a", endingOffsets="earliest")
    with pytest.raises(StromOptionError, match="can't be earliest for batch"):
        src(streaming=False, subscribe="a", endingOffsets='{"a":{"0":-2}}')
    with pytest.raises(StromOptionError, match="greater than the ending"):
        src(streaming=False, subscribe="a", startingOffsets='{"a":{"0":9}}',
            endingOffsets='{"a":{"0":3}}')
    with pytest.raises(StromOptionError, match="same topic partitions"):
        src(streaming=False, subscribe="a", startingOffsets='{"a":{"0":1}}',
            endingOffsets='{"a":{"1":3}}')
    ok = src(streaming=False, subscribe="a", startingOffsets='{"a":{"0":-2,"1":4}}',
             endingOffsets='{"a":{"0":-1,"1":7}}')
    assert ok.starting.offset_map == {("a", 0): EARLIEST, ("a", 1): 4}
    assert ok.ending.offset_map == {("a", 0): LATEST, ("a", 1): 7}


def test_timestamp_precedence_and_strategy():
    s = src(subscribe="a", startingTimestamp="1000", startingOffsets="earliest",
            startingOffsetsByTimestamp='{"a":{"0":5}}')
    assert s.starting.kind == "timestamp" and s.starting.timestamp == 1000
    s = src(subscribe="a", startingOffsets="earliest",
            startingOffsetsByTimestamp='{"a":{"0":5}}',
            startingOffsetsByTimestampStrategy="LATEST")
    assert s.starting.kind == "timestamps"
    assert s.starting.offset_map == {("a", 0): 5}
    assert s.starting.on_no_match == "latest"
    with pytest.raises(StromOptionError):
        src(subscribe="a", startingOffsetsByTimestampStrategy="sometimes")


def test_json_helpers():
    assert parse_partitions_json('{"a":[0,1],"b":[2]}') == [("a", 0), ("a", 1), ("b", 2)]
    assert parse_partition_offsets_json('{"a":{"0":23,"1":-1},"b":{"0":-2}}') == {
        ("a", 0): 23, ("a", 1): -1, ("b", 0): -2}
    for bad in ("[1]", "{", '{"a":[0.5]}'):
        with pytest.raises(StromOptionError):
            parse_partitions_json(bad)
    with pytest.raises(StromOptionError):
        parse_partition_offsets_json('{"a":{"0":"x"}}')


@pytest.mark.parametrize("text, ms", [
    ("15m", 900_000), ("30s", 30_000), ("250ms", 250), ("2h", 7_200_000), ("1d", 86_400_000),
    ("100", 100), (" 5 min ", 300_000),
])
def test_time_strings(text, ms):
    assert parse_time_ms(text, "maxTriggerDelay") == ms


def test_bad_time_string():
    with pytest.raises(StromOptionError):
        parse_time_ms("soon", "maxTriggerDelay")


def test_subscription_matching():
    pat = src(subscribePattern=r"clicks\..*").subscription
    assert pat.wants_topic("clicks.eu")
    assert not pat.wants_topic("xclicks.eu")  # a full match, like Java's matches()
    assert not src(subscribePattern=".*").subscription.wants_topic("__consumer_offsets")
    assign = src(assign='{"a":[1,0]}').subscription
    assert assign.partitions == (("a", 0), ("a", 1))


def test_jaas_config_becomes_librdkafka_settings():
    conf = librdkafka_config({
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            'username="alice" password="s3\\"cret";',
        "sasl.mechanism": "PLAIN",
    })
    assert conf == {"sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": 's3"cret'}


def test_sink_options():
    s = parse_sink_options({**BOOT, "topic": " out "})
    assert s.topic == "out" and s.delivery == AT_LEAST_ONCE
    assert parse_sink_options(BOOT).topic is None
    for key in ("kafka.key.serializer", "kafka.value.serializer"):
        with pytest.raises(StromOptionError):
            parse_sink_options({**BOOT, key: "x"})
    with pytest.raises(StromOptionError, match=r"bootstrap\.servers"):
        parse_sink_options({"topic": "t"})


@pytest.mark.parametrize("opts", [{"exactlyOnce": "true"}, {"transactional": "TRUE"}])
def test_exactly_once_option(opts):
    s = parse_sink_options({**BOOT, **opts})
    assert s.delivery == EXACTLY_ONCE and s.exactly_once and s.transactional_id_prefix is None
    assert not parse_sink_options({**BOOT, "exactlyOnce": "false"}).exactly_once
    s = parse_sink_options({**BOOT, **opts, "transactionalIdPrefix": " orders-out "})
    assert s.transactional_id_prefix == "orders-out"


@pytest.mark.parametrize("opts, message", [
    ({"kafka.transactional.id": "x"}, "derives one transactional id per Spark task"),
    ({"kafka.transactional.id": "x", "exactlyOnce": "true"}, "transactionalIdPrefix"),
    ({"transactionalIdPrefix": "p"}, "needs exactlyOnce=true"),
    ({"transactionalIdPrefix": " ", "exactlyOnce": "true"}, "non-empty name without spaces"),
    ({"transactionalIdPrefix": "a b", "exactlyOnce": "true"}, "non-empty name without spaces"),
    ({"exactlyOnce": "yes"}, "must be 'true' or 'false'"),
    ({"exactlyOnce": "true", "kafka.enable.idempotence": "false"}, "idempotent"),
])
def test_exactly_once_option_errors(opts, message):
    with pytest.raises(StromOptionError, match=message):
        parse_sink_options({**BOOT, **opts})


def test_java_names_are_translated():
    conf = librdkafka_config({"fetch.max.wait.ms": "50", "receive.buffer.bytes": "65536",
                              "default.api.timeout.ms": "1000", "security.protocol": "SSL"})
    assert conf == {"fetch.wait.max.ms": "50", "socket.receive.buffer.bytes": "65536",
                    "security.protocol": "SSL"}


def test_settings_only_librdkafka_implements() -> None:
    assert native_reader_unsupported({"bootstrap.servers": "h:1"}) is None
    assert native_reader_unsupported({"fetch.max.wait.ms": "10", "receive.buffer.bytes": "1"}) is None
    assert "sasl.mechanism=GSSAPI" in (native_reader_unsupported(
        {"security.protocol": "SASL_PLAINTEXT"}) or "")
    assert "OAUTHBEARER" in (native_reader_unsupported(
        {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}) or "")
    assert "kafka.ssl.ca.location" in (native_reader_unsupported({"ssl.ca.location": "/ca"}) or "")
    assert "JKS" in (native_reader_unsupported({"ssl.truststore.type": "JKS"}) or "")
    from strom.security.client import SUPPORTED

    assert NATIVE_SASL_MECHANISMS == SUPPORTED


def test_the_fetcher_option() -> None:
    from strom.spark.source import _native

    assert src(subscribe="t").fetcher == "auto"
    with pytest.raises(StromOptionError, match="fetcher"):
        src(subscribe="t", fetcher="turbo")
    assert _native(src(subscribe="t"))
    assert not _native(src(subscribe="t", fetcher="LIBRDKAFKA"))
    assert not _native(src(subscribe="t", **{"kafka.ssl.ca.location": "/ca"}))
    with pytest.raises(StromOptionError, match=r"fetcher=native: kafka\.ssl\.ca\.location"):
        _native(src(subscribe="t", fetcher="native", **{"kafka.ssl.ca.location": "/ca"}))
