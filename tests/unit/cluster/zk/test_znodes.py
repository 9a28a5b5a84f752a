"""Kafka's znode paths and JSON, as Kafka's own tools write and read them."""

import json
import uuid

import pytest

from strom.cluster.image import BrokerInfo
from strom.cluster.zk import znodes as zn


def test_paths() -> None:
    assert zn.broker_path(3) == "/brokers/ids/3"
    assert zn.topic_path("t") == "/brokers/topics/t"
    assert zn.partitions_path("t") == "/brokers/topics/t/partitions"
    assert zn.partition_path("t", 2) == "/brokers/topics/t/partitions/2"
    assert zn.state_path("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert zn.topic_config_path("t") == "/config/topics/t"
    assert zn.broker_config_path("1") == "/config/brokers/1"
    assert zn.broker_config_path("") == "/config/brokers/<default>"
    assert zn.delete_topic_path("t") == "/admin/delete_topics/t"
    assert zn.broker_config_entity("<default>") == ""
    assert zn.broker_config_entity("2") == "2"
    assert zn.group_config_path("app") == "/config/groups/app"
    assert zn.group_config_path("a/b c") == "/config/groups/a%2Fb%20c"
    assert zn.group_config_path("..") == "/config/groups/%2E%2E"
    assert zn.desanitize("%2E%2E") == ".." and zn.desanitize("a%2Fb%20c") == "a/b c"


def test_every_persistent_path_is_absolute_and_unique() -> None:
    assert len(set(zn.PERSISTENT_PATHS)) == len(zn.PERSISTENT_PATHS)
    assert all(p.startswith("/") and not p.endswith("/") for p in zn.PERSISTENT_PATHS)
    for path in (zn.BROKER_IDS, zn.TOPICS, zn.CONFIG_TOPICS, zn.CONFIG_BROKERS, zn.DELETE_TOPICS,
                 zn.PRODUCER_ID_BLOCK):
        assert path in zn.PERSISTENT_PATHS


# -- topic ids -----------------------------------------------------------------------------


def test_topic_ids_print_as_kafka_prints_them() -> None:
    # Kafka's Uuid.ZERO_UUID and Uuid.METADATA_TOPIC_ID (most significant bits first)
    assert zn.uuid_to_kafka(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert zn.uuid_to_kafka(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    u = uuid.UUID("f8a3e6b1-0c4d-4e2f-9a1b-2c3d4e5f6071")
    text = zn.uuid_to_kafka(u)
    assert len(text) == 22 and "=" not in text
    assert zn.uuid_from_kafka(text) == u


def test_url_safe_alphabet_round_trips() -> None:
    u = uuid.UUID(bytes=bytes([0xFB, 0xFF] * 8))  # base64 digits 62/63: '-' and '_'
    text = zn.uuid_to_kafka(u)
    assert set(text) & {"-", "_"} and not set(text) & {"+", "/"}
    assert zn.uuid_from_kafka(text) == u


def test_bad_topic_id_text_is_refused() -> None:
    with pytest.raises(ValueError):
        zn.uuid_from_kafka("AAAA")


def test_new_topic_ids_are_usable_on_command_lines() -> None:
    for _ in range(2000):
        u = zn.new_topic_id()
        assert u.int > 1
        assert not zn.uuid_to_kafka(u).startswith("-")


# -- brokers, controller, cluster id --------------------------------------------------------


def test_broker_registration_is_kafka_version_5() -> None:
    data = zn.encode_broker(BrokerInfo(2, "10.0.0.2", 9093, "rack-a"), 1700000000000)
    obj = json.loads(data)
    assert obj["version"] == 5
    assert (obj["host"], obj["port"]) == ("10.0.0.2", 9093)
    assert obj["endpoints"] == ["PLAINTEXT://10.0.0.2:9093"]
    assert obj["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    assert obj["jmx_port"] == -1
    assert obj["timestamp"] == "1700000000000"  # a string, as Kafka writes it
    assert obj["rack"] == "rack-a"
    assert zn.decode_broker(2, data) == BrokerInfo(2, "10.0.0.2", 9093, "rack-a",
                                                   {"PLAINTEXT": ("10.0.0.2", 9093)})


def test_broker_without_rack_has_no_rack_key() -> None:
    data = zn.encode_broker(BrokerInfo(1, "h", 1, None), 0)
    assert "rack" not in json.loads(data)
    assert zn.decode_broker(1, data).rack is None


def test_kafka_registration_prefers_the_plaintext_endpoint() -> None:
    data = json.dumps({
        "listener_security_protocol_map": {"SSL": "SSL", "PLAINTEXT": "PLAINTEXT"},
        "endpoints": ["SSL://broker1:9093", "PLAINTEXT://broker1:9092"],
        "jmx_port": 9999, "host": "broker1", "timestamp": "1", "port": 9092, "version": 4,
    }).encode()
    assert zn.decode_broker(7, data) == BrokerInfo(
        7, "broker1", 9092, None, {"SSL": ("broker1", 9093), "PLAINTEXT": ("broker1", 9092)})


def test_registration_with_named_listeners() -> None:
    info = BrokerInfo(3, "b3", 9094, None, {"CLIENT": ("b3", 9092), "INTERNAL": ("b3", 9094)})
    data = zn.encode_broker(info, 1, {"CLIENT": "SASL_SSL", "INTERNAL": "PLAINTEXT"})
    obj = json.loads(data)
    assert obj["endpoints"] == ["CLIENT://b3:9092", "INTERNAL://b3:9094"]
    assert obj["listener_security_protocol_map"] == {"CLIENT": "SASL_SSL",
                                                     "INTERNAL": "PLAINTEXT"}
    assert (obj["host"], obj["port"]) == ("b3", 9094)  # the PLAINTEXT listener's, as Kafka
    back = zn.decode_broker(3, data, inter_broker="INTERNAL")
    assert (back.host, back.port) == ("b3", 9094)
    assert back.address("CLIENT") == ("b3", 9092)


def test_old_registration_without_endpoints_uses_host_and_port() -> None:
    data = b'{"version":1,"host":"old","port":9092,"jmx_port":-1,"timestamp":"1"}'
    assert zn.decode_broker(1, data) == BrokerInfo(1, "old", 9092, None)


def test_ipv6_endpoint() -> None:
    data = b'{"version":5,"endpoints":["PLAINTEXT://[::1]:9092"],"host":null,"port":-1}'
    assert zn.decode_broker(1, data) == BrokerInfo(1, "::1", 9092, None,
                                                   {"PLAINTEXT": ("::1", 9092)})


@pytest.mark.parametrize("data", [b"", b'{"version":5,"endpoints":[],"host":null,"port":-1}'])
def test_unusable_registration_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        zn.decode_broker(1, data)


def test_controller_and_epoch() -> None:
    data = zn.encode_controller(3, 123)
    assert json.loads(data) == {"version": 2, "brokerid": 3, "timestamp": "123"}
    assert zn.decode_controller(data) == 3
    assert zn.decode_controller(b'{"version":1,"brokerid":9,"timestamp":"1"}') == 9
    assert zn.encode_controller_epoch(12) == b"12"
    assert zn.decode_controller_epoch(b"12") == 12
    assert zn.decode_controller_epoch(None) == 0
    with pytest.raises(ValueError):
        zn.decode_controller(b"")


def test_cluster_id() -> None:
    data = zn.encode_cluster_id("abc")
    assert json.loads(data) == {"version": "1", "id": "abc"}
    assert zn.decode_cluster_id(data) == "abc"
    with pytest.raises(ValueError):
        zn.decode_cluster_id(b'{"version":"1"}')


# -- topics and partition states ------------------------------------------------------------


def test_topic_assignment_round_trip() -> None:
    tid = zn.new_topic_id()
    a = zn.TopicAssignment(tid, {1: [2, 3], 0: [1, 2]}, adding_replicas={0: [3]})
    obj = json.loads(zn.encode_topic(a))
    assert obj["version"] == 3
    assert obj["topic_id"] == zn.uuid_to_kafka(tid)
    assert obj["partitions"] == {"0": [1, 2], "1": [2, 3]}
    assert obj["adding_replicas"] == {"0": [3]} and obj["removing_replicas"] == {}
    assert zn.decode_topic(zn.encode_topic(a)) == a


def test_topic_written_by_old_kafka_has_no_id() -> None:
    a = zn.decode_topic(b'{"version":1,"partitions":{"0":[1]}}')
    assert a.topic_id is None and a.partitions == {0: [1]}
    assert a.adding_replicas == {} and a.removing_replicas == {}
    assert zn.decode_topic(None).partitions == {}


def test_partition_state_round_trip() -> None:
    s = zn.LeaderAndIsr(leader=2, leader_epoch=5, isr=(2, 3), controller_epoch=4)
    obj = json.loads(zn.encode_state(s))
    assert obj == {"controller_epoch": 4, "leader": 2, "version": 1, "leader_epoch": 5,
                   "isr": [2, 3]}
    assert zn.decode_state(zn.encode_state(s)) == s
    # newer Kafka versions add fields; they are ignored
    extra = b'{"controller_epoch":1,"leader":-1,"version":1,"leader_epoch":0,"isr":[1],' \
            b'"leader_recovery_state":0}'
    assert zn.decode_state(extra) == zn.LeaderAndIsr(-1, 0, (1,), 1)
    with pytest.raises(ValueError):
        zn.decode_state(b"")


# -- configs and producer ids ---------------------------------------------------------------


def test_config_round_trip() -> None:
    data = zn.encode_config({"retention.ms": "1000", "cleanup.policy": "compact"})
    assert json.loads(data) == {"version": 1, "config": {"cleanup.policy": "compact",
                                                          "retention.ms": "1000"}}
    assert zn.decode_config(data) == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert zn.decode_config(b"") == {} and zn.decode_config(None) == {}
    assert zn.decode_config(b'{"version":1,"config":{}}') == {}


def test_producer_id_blocks_follow_each_other() -> None:
    assert zn.decode_producer_id_block(b"") is None
    first = zn.next_producer_id_block(None, 1)
    assert (first.start, first.end, first.size) == (0, 999, 1000)
    data = zn.encode_producer_id_block(first)
    assert json.loads(data) == {"version": 1, "broker": 1, "block_start": "0",
                                "block_end": "999"}
    second = zn.next_producer_id_block(zn.decode_producer_id_block(data), 2)
    assert (second.broker, second.start, second.end) == (2, 1000, 1999)
    # Kafka's own encoding uses strings; plain numbers are accepted too
    parsed = zn.decode_producer_id_block(b'{"version":1,"broker":3,"block_start":5000,'
                                         b'"block_end":5999}')
    assert parsed == zn.ProducerIdBlock(3, 5000, 5999)


@pytest.mark.parametrize("data", [b"[1,2]", b'"text"'])
def test_non_object_json_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        zn.decode_config(data)


# -- client quotas -------------------------------------------------------------------------------


def test_sanitize_as_kafka() -> None:
    # Java's URLEncoder keeps letters, digits and .-*_ (then * becomes %2A, + for a space %20)
    assert zn.sanitize("alice") == "alice"
    assert zn.sanitize("a b*c~d/é.-_") == "a%20b%2Ac%7Ed%2F%C3%A9.-_"
    assert zn.sanitize("<default>") == "%3Cdefault%3E"  # never the default entity's name
    assert zn.desanitize("a+b%20c") == "a b c"
    for name in ("alice", "a b*c~d/é.-_", "CN=x,O=y", "100%"):
        assert zn.desanitize(zn.sanitize(name)) == name


def test_quota_entity_paths_are_kafkas() -> None:
    assert zn.quota_entity_path({"user": "alice"}) == "/config/users/alice"
    assert zn.quota_entity_path({"user": None}) == "/config/users/<default>"
    assert zn.quota_entity_path({"client-id": "my app"}) == "/config/clients/my%20app"
    assert zn.quota_entity_path({"client-id": None}) == "/config/clients/<default>"
    assert zn.quota_entity_path({"user": "CN=a", "client-id": None}) == (
        "/config/users/CN%3Da/clients/<default>")
    assert zn.entity_name_of("<default>") is None
    assert zn.entity_name_of("my%20app") == "my app"


def test_quota_values_as_config_strings() -> None:
    assert zn.encode_quota(1024.0) == "1024"
    assert zn.encode_quota(12.5) == "12.5"
    config = {"producer_byte_rate": "1024", "SCRAM-SHA-256": "salt=...", "request_percentage":
              "x"}
    assert zn.decode_quotas(config, ("producer_byte_rate", "request_percentage")) == {
        "producer_byte_rate": 1024.0}
